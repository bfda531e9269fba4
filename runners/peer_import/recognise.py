"""Which tool wrote a file, told by its content (never by its name), and why not when none did.

rooflab's own exports (the contract columns in a CSV header or a JSON record, or a Parquet or gzip
file) are told first and handed to db.importer as before. Then the rows of the format table
(format_table.py) are tried in its order, each row's test looking at a `sniff.Sniff` of the text: JSON
documents by their keys, CSV by its header, the text tables by their column headers wherever they
stand among other output. A JSON document cut short is still told by the keys it begins with, so that
its import fails with the line where it breaks rather than as a file nobody recognises. nvbench's
markdown and CSV outputs are not read, and the reason says which of its outputs is.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rooflab.runners.peer_import.format_table import FORMATS, Format, format_names
from rooflab.runners.peer_import.sniff import Sniff

EXPORT = "rooflab export"
EXPORT_MARKERS = {"run_id", "case_key", "median_ms"}
_BINARY_SUFFIXES = (".parquet", ".gz")
MAX_BYTES = 1 << 30  # a file above this is not read into memory


@dataclass(frozen=True)
class Recognised:
    """The format of a file (a row of the table, or rooflab's own export) and its text, or why it is none."""

    format: Format | None
    export: bool = False
    why: str = ""
    text: str = ""

    @property
    def name(self) -> str | None:
        """The format's name; None when the file is not recognised."""
        return self.format.name if self.format is not None else EXPORT if self.export else None


def is_rooflab_export(sniff: Sniff) -> bool:
    """rooflab's own export: the contract's run_id, case_key and median_ms as JSON keys or CSV columns."""
    record = sniff.first_record
    return (record is not None and EXPORT_MARKERS <= set(record)) or EXPORT_MARKERS <= set(sniff.csv_header)


def recognise_text(text: str) -> Recognised:
    """The format of `text` (its `why` left empty when none: unread_why says it)."""
    sniff = Sniff(text)
    if is_rooflab_export(sniff):
        return Recognised(None, export=True, text=text)
    for row in FORMATS:
        if row.looks_like.resolve()(sniff):
            return Recognised(row, text=text)
    return Recognised(None, text=text)


NOT_READ = f"none of the formats rooflab reads ({format_names()}), and no rooflab export columns"


def unread_why(text: str) -> str:
    """Why a text no format matched is not read: a peer's output rooflab does not read, named with
    the output it does read, or NOT_READ."""
    head = text[:200000]
    first = next((line.strip() for line in head.splitlines() if line.strip()), "")
    if first.startswith("Benchmark,Device,Device Name,") or "GPU Time (sec)" in first:
        return "nvbench's CSV output (--csv): rooflab reads nvbench's JSON (run the benchmark with --json FILE)"
    if "# Benchmark Results" in head and "| GPU Time" in head or "Pass: Cold:" in head:
        return "nvbench's markdown output: rooflab reads nvbench's JSON (run the benchmark with --json FILE)"
    return NOT_READ


def recognise(path: Path) -> Recognised:
    """The format of the file at `path`, with its text (for a text format)."""
    name = path.name.lower()
    if name.endswith(_BINARY_SUFFIXES):
        return Recognised(None, export=True)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            return Recognised(None, why=f"{size} bytes: larger than any tool's output rooflab reads ({MAX_BYTES} B)")
        data = path.read_bytes()
    except OSError as exc:
        return Recognised(None, why=f"cannot be read ({exc.strerror or exc})")
    if path.parent.name.endswith("-bin") and name.endswith(".bin"):
        return Recognised(None, why="a sample file of nvbench --jsonbin (read with its JSON file)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Recognised(None, why="not UTF-8 text (a binary file)")
    if not text.strip():
        return Recognised(None, why="empty")
    found = recognise_text(text)
    return found if found.name is not None else Recognised(None, why=unread_why(text))
