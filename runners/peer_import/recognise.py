"""Which tool wrote a file, told by its content (never by its name), and why not when none did.

JSON documents are told by their keys (nccl-tests' `config` and `results`, nvbench's `devices` and
`benchmarks`, rccl-tests' `algBw` and `busBw`); CSV by its header (BabelStream's `function,num_times,
n_elements,sizeof,...`, rccl-tests' field names); nccl-tests' stdout by its table's column header
(`size count type ... algbw busbw`), wherever it stands among other output; BabelStream's own table
by its header (`Function  MBytes/sec  Min (sec) ...`) and its `Precision:` line. nvbench's markdown and
CSV outputs are not read, and the reason says which of its outputs is. A JSON document cut short
is still told by the keys it begins with, so that its import fails with the line where it breaks
rather than as a file nobody recognises. rooflab's own exports (the contract columns, or a Parquet or
gzip file) are handed to db.importer as before.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rooflab.runners.peer_import.babelstream import looks_like_babelstream
from rooflab.runners.peer_import.babelstream_text import looks_like_babelstream_text
from rooflab.runners.peer_import.nccl_json import looks_like_nccl_json
from rooflab.runners.peer_import.nccl_tests import looks_like_nccl_tests
from rooflab.runners.peer_import.nvbench import looks_like_nvbench
from rooflab.runners.peer_import.rccl_files import looks_like_rccl_keys

EXPORT_MARKERS = {"run_id", "case_key", "median_ms"}
_BINARY_SUFFIXES = (".parquet", ".gz")
MAX_BYTES = 1 << 30  # a file above this is not read into memory


class PeerFormat(StrEnum):
    """The file formats `rooflab import` reads."""

    NCCL_TESTS_TEXT = "nccl-tests or rccl-tests output"
    NCCL_TESTS_JSON = "nccl-tests JSON"
    RCCL_TESTS_JSON = "rccl-tests JSON"
    RCCL_TESTS_CSV = "rccl-tests CSV"
    NVBENCH_JSON = "nvbench JSON"
    BABELSTREAM_CSV = "BabelStream CSV"
    BABELSTREAM_TEXT = "BabelStream output"
    ROOFLAB_EXPORT = "rooflab export"


@dataclass(frozen=True)
class Recognised:
    """The format of a file and its text, or why it is none of them."""

    format: PeerFormat | None
    why: str = ""
    text: str = ""


def _json_format(text: str) -> PeerFormat | None:
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return _json_lines_format(text) or _cut_json_format(text)
    if looks_like_nccl_json(document):
        return PeerFormat.NCCL_TESTS_JSON
    if looks_like_nvbench(document):
        return PeerFormat.NVBENCH_JSON
    if isinstance(document, list) and document and isinstance(document[0], dict) and looks_like_rccl_keys(document[0]):
        return PeerFormat.RCCL_TESTS_JSON
    if isinstance(document, dict):
        return _keys_format(document)
    return None


def _keys_format(record: dict[str, object]) -> PeerFormat | None:
    if looks_like_rccl_keys(record):
        return PeerFormat.RCCL_TESTS_JSON
    if EXPORT_MARKERS <= set(record):
        return PeerFormat.ROOFLAB_EXPORT
    return None


def _json_lines_format(text: str) -> PeerFormat | None:
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        record = json.loads(first.strip().rstrip(","))
    except json.JSONDecodeError:
        return None
    return _keys_format(record) if isinstance(record, dict) else None


def _cut_json_format(text: str) -> PeerFormat | None:
    """A JSON document cut short, told by the keys it begins with (its parser then says where it breaks)."""
    head = text[:20000]
    if '"benchmarks"' in head and '"devices"' in head:
        return PeerFormat.NVBENCH_JSON
    if '"config"' in head and ('"results"' in head or '"nthreads"' in head):
        return PeerFormat.NCCL_TESTS_JSON
    return None


def _csv_format(text: str) -> PeerFormat | None:
    first = next((line for line in text.splitlines() if line.strip()), "")
    header = next(csv.reader(io.StringIO(first)), [])
    if looks_like_rccl_keys(header):
        return PeerFormat.RCCL_TESTS_CSV
    if EXPORT_MARKERS <= {h.strip() for h in header}:
        return PeerFormat.ROOFLAB_EXPORT
    return None


def recognise_text(text: str) -> PeerFormat | None:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        found = _json_format(stripped)
        if found is not None:
            return found
    if looks_like_babelstream(text):
        return PeerFormat.BABELSTREAM_CSV
    found = _csv_format(text)
    if found is not None:
        return found
    if looks_like_nccl_tests(text):
        return PeerFormat.NCCL_TESTS_TEXT
    return PeerFormat.BABELSTREAM_TEXT if looks_like_babelstream_text(text) else None


NOT_READ = "no nccl-tests or rccl-tests table, no nccl-tests or nvbench JSON, no BabelStream table or CSV, "\
           "no rccl-tests CSV header, no rooflab export columns"


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
        return Recognised(PeerFormat.ROOFLAB_EXPORT)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            return Recognised(None, f"{size} bytes: larger than any tool's output rooflab reads ({MAX_BYTES} B)")
        data = path.read_bytes()
    except OSError as exc:
        return Recognised(None, f"cannot be read ({exc.strerror or exc})")
    if path.parent.name.endswith("-bin") and name.endswith(".bin"):
        return Recognised(None, "a sample file of nvbench --jsonbin (read with its JSON file)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Recognised(None, "not UTF-8 text (a binary file)")
    if not text.strip():
        return Recognised(None, "empty")
    found = recognise_text(text)
    if found is None:
        return Recognised(None, unread_why(text))
    return Recognised(found, text=text)
