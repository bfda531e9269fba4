"""One peer file from its text to rooflab results: the parser and the converter its row of the format table
names, then the rule of every import (agreement.settle).

`read(row, text, source_of(path, options))` is what `rooflab import` calls per file; it writes nothing. `file_time`
says which time a file's results take when the file gives none of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rooflab.db.measurement_columns import gbps_of
from rooflab.runners.peer_import.agreement import rederived_gbps, settle
from rooflab.runners.peer_import.format_table import Format
from rooflab.runners.peer_import.printed import PrintedRate
from rooflab.runners.peer_import.results import Conversion, ImportedRun, Source, TimeSource, When, largest_sizes


@dataclass(frozen=True)
class ImportOptions:
    """What the command line adds to what a file says."""

    measured_at: datetime | None = None  # for results whose file gives no time
    device_name: str | None = None  # for files that name no GPU (BabelStream CSV, rccl-tests' files)
    ranks: int | None = None  # for rccl-tests' files written without their `gpus` field
    buffer_bytes: int | None = None  # nvbandwidth's buffer (its -b), which its output does not print
    host: str | None = None  # the node, for outputs that name none (nvbandwidth before v0.8)


def file_time(path: Path, options: ImportOptions) -> When:
    """--measured-at when given, else the file's modification time (UTC)."""
    if options.measured_at is not None:
        return When(options.measured_at, TimeSource.OPTION)
    return When(datetime.fromtimestamp(path.stat().st_mtime, tz=UTC), TimeSource.MODIFIED)


def source_of(path: Path, options: ImportOptions) -> Source:
    return Source(name=path.name, when=file_time(path, options), folder=path.parent, device_name=options.device_name,
                  ranks=options.ranks, buffer_bytes=options.buffer_bytes, host=options.host)


def read(row: Format, text: str, source: Source) -> Conversion:
    """The results of a text of the format `row`, each held to the figures the file printed (PeerFormatError
    when the file is malformed, cut short, or printed a figure its stored result would not give)."""
    conversion = row.converter.resolve()(row.parser.resolve()(text), source)
    if not isinstance(conversion, Conversion):
        raise TypeError(f"{row.converter} gave {type(conversion).__name__}, not a Conversion")
    return settle(conversion)


@dataclass(frozen=True)
class RateShown:
    """A rate the file printed for a result, and rooflab's derivation of it from what it would store."""

    what: str
    printed_gbps: float
    rooflab_gbps: float | None


@dataclass(frozen=True)
class LargestSize:
    """A series' largest size in a run: its case, status, stored rate, and the rates the file printed."""

    case_key: str
    status: str
    stored_gbps: float | None
    printed: tuple[RateShown, ...]


def largest_size_rates(run: ImportedRun) -> list[LargestSize]:
    """Each series' largest size in a run (results.largest_sizes), as --dry-run shows it."""
    return [LargestSize(item.record.identity.case.case_key, str(item.record.status), gbps_of(item.record),
                        tuple(RateShown(r.what, r.printed_gbps.value, rederived_gbps(item.record, r))
                              for r in item.printed if isinstance(r, PrintedRate)))
            for item in largest_sizes(run)]
