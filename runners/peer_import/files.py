"""One peer file from its text to rooflab results: the parser its format names, then the conversion.

`convert(path, recognised, options)` is what `rooflab import` calls per file; it writes nothing.
`file_time` says which time a file's results take when the file gives none of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rooflab.runners.peer_import.babelstream import parse_babelstream_csv
from rooflab.runners.peer_import.babelstream_text import parse_babelstream_text
from rooflab.runners.peer_import.collective_import import convert_nccl_tests, rccl_tests_as_tables
from rooflab.runners.peer_import.nccl_json import parse_nccl_json
from rooflab.runners.peer_import.nccl_tests import parse_nccl_tests_text
from rooflab.runners.peer_import.nvbench import parse_nvbench_json
from rooflab.runners.peer_import.nvbench_results import convert_nvbench
from rooflab.runners.peer_import.rccl_files import parse_rccl_csv, parse_rccl_json
from rooflab.runners.peer_import.recognise import PeerFormat, Recognised
from rooflab.runners.peer_import.results import Conversion, TimeSource, When
from rooflab.runners.peer_import.stream_results import convert_babelstream
from rooflab.vocab import Tool


@dataclass(frozen=True)
class ImportOptions:
    """What the command line adds to what a file says."""

    measured_at: datetime | None = None  # for results whose file gives no time
    device_name: str | None = None  # for files that name no GPU (BabelStream CSV, rccl-tests' files)
    ranks: int | None = None  # for rccl-tests' files written without their `gpus` field


def file_time(path: Path, options: ImportOptions) -> When:
    """--measured-at when given, else the file's modification time (UTC)."""
    if options.measured_at is not None:
        return When(options.measured_at, TimeSource.OPTION)
    return When(datetime.fromtimestamp(path.stat().st_mtime, tz=UTC), TimeSource.MODIFIED)


def convert(path: Path, recognised: Recognised, options: ImportOptions) -> Conversion:
    """The results of one recognised peer file (PeerFormatError when it is malformed)."""
    when, text, source = file_time(path, options), recognised.text, path.name
    fmt = recognised.format
    if fmt == PeerFormat.NCCL_TESTS_TEXT:
        return convert_nccl_tests(parse_nccl_tests_text(text), source=source, when=when,
                                  device_name=options.device_name)
    if fmt == PeerFormat.NCCL_TESTS_JSON:
        test = parse_nccl_json(text)
        return convert_nccl_tests([test], source=source, when=when, device_name=options.device_name,
                                  command_line=" ".join(_args(text)))
    if fmt in (PeerFormat.RCCL_TESTS_JSON, PeerFormat.RCCL_TESTS_CSV):
        rows = parse_rccl_json(text) if fmt == PeerFormat.RCCL_TESTS_JSON else parse_rccl_csv(text)
        tables = rccl_tests_as_tables(rows, options.ranks)
        if not tables:
            return Conversion(tool=Tool.RCCL_TESTS)
        return convert_nccl_tests(tables, source=source, when=when, device_name=options.device_name)
    if fmt == PeerFormat.NVBENCH_JSON:
        return convert_nvbench(parse_nvbench_json(text), source=source, when=when, folder=path.parent)
    if fmt in (PeerFormat.BABELSTREAM_CSV, PeerFormat.BABELSTREAM_TEXT):
        parse = parse_babelstream_csv if fmt == PeerFormat.BABELSTREAM_CSV else parse_babelstream_text
        return convert_babelstream(parse(text), source=source, when=when, device_name=options.device_name)
    raise ValueError(f"{fmt} is not a peer format")


def _args(text: str) -> list[str]:
    import json

    try:
        args = json.loads(text).get("args") or []
    except (ValueError, AttributeError):
        return []
    return [str(a) for a in args]
