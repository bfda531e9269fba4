"""rccl-tests' own result files (`-x/--output_file FILE -Z json|csv`, rccl-tests PR #93; its stdout is
nccl-tests' table, read by nccl_tests): text in, one `RcclResult` per line out.

The JSON form is one object per line (a JSON array of them since rccl-tests PR #140), the CSV form a
header and one line per result; both carry `name` (AllReduce, ...), `size`, `type`, `redop`,
`inPlace` (0/1), `time` (microseconds), `algBw`, `busBw` (GB/s), `#wrong` (a string or a number) and,
without MPI, `gpus`; newer builds add `numCycle`. Unknown keys are left aside, so added fields do not
break a read. Neither form names the hosts or the GPUs.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

from rooflab.runners.peer_import.errors import PeerFormatError, json_document
from rooflab.runners.peer_import.printed import Printed, exact, parse_printed
from rooflab.runners.peer_import.sniff import Sniff

REQUIRED = ("name", "size", "type", "time", "algBw", "busBw")
_RANKS_KEYS = ("gpus", "ranks", "nranks", "numRanks")


@dataclass(frozen=True)
class RcclResult:
    """One result line: one message size and one half (in place or not) of an rccl-tests test."""

    line: int
    name: str  # as written: AllReduce, AllGather, ...
    size_bytes: int
    dtype: str
    redop: str | None
    in_place: bool
    time_us: Printed
    algbw_gbps: Printed
    busbw_gbps: Printed
    wrong: float | None  # None when not checked
    ranks: int | None  # `gpus` (single-process builds); None when the file does not say
    cycle: int | None = None  # `numCycle` (-N)


def looks_like_rccl_keys(keys: Any) -> bool:
    """Whether a record's keys (or a CSV header) are rccl-tests' result fields."""
    names = {str(k).strip() for k in keys}
    return {"algBw", "busBw", "name", "size"} <= names


def recognises_rccl_json(sniff: Sniff) -> bool:
    """rccl-tests' `-Z json` file: JSON objects (one a line, or a list) with its result fields."""
    return sniff.first_record is not None and looks_like_rccl_keys(sniff.first_record)


def recognises_rccl_csv(sniff: Sniff) -> bool:
    """rccl-tests' `-Z csv` file: a CSV header of its result fields."""
    return not sniff.json_like and looks_like_rccl_keys(sniff.csv_header)


def _figure(value: Any, what: str, line: int) -> Printed:
    if isinstance(value, bool):
        raise PeerFormatError(f"{what} is {value!r}, not a number", line)
    if isinstance(value, (int, float)):
        return exact(float(value))
    try:
        return parse_printed(str(value).strip())
    except ValueError:
        raise PeerFormatError(f"{what} {value!r} is not a number", line) from None


def _wrong(value: Any, line: int) -> float | None:
    if value is None or str(value).strip().upper() in ("", "N/A", "NA"):
        return None
    return _figure(value, "#wrong", line).value


def _result(record: dict[str, Any], line: int) -> RcclResult:
    record = {str(k).strip(): v for k, v in record.items()}
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise PeerFormatError(f"the result lacks {', '.join(missing)}", line)
    ranks_key = next((k for k in _RANKS_KEYS if k in record and str(record[k]).strip()), None)
    try:
        size = int(str(record["size"]).strip())
        ranks = int(str(record[ranks_key]).strip()) if ranks_key else None
        cycle = int(str(record["numCycle"]).strip()) if str(record.get("numCycle", "")).strip() else None
        in_place = bool(int(str(record.get("inPlace", 0)).strip() or 0))
    except ValueError:
        raise PeerFormatError("size, gpus, numCycle and inPlace must be whole numbers", line) from None
    redop = str(record["redop"]).strip() if record.get("redop") not in (None, "") else None
    return RcclResult(line=line, name=str(record["name"]).strip(), size_bytes=size, dtype=str(record["type"]).strip(),
                      redop=redop, in_place=in_place, time_us=_figure(record["time"], "time", line),
                      algbw_gbps=_figure(record["algBw"], "algBw", line),
                      busbw_gbps=_figure(record["busBw"], "busBw", line),
                      wrong=_wrong(record.get("#wrong", record.get("wrong")), line), ranks=ranks, cycle=cycle)


def parse_rccl_json(text: str) -> list[RcclResult]:
    """JSON lines (one object per line) or one JSON array of the objects."""
    stripped = text.strip()
    if stripped.startswith("["):
        items = json_document(stripped)
        return [_result(item, i + 1) for i, item in enumerate(items) if isinstance(item, dict)]
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line.strip().rstrip(","))
        except json.JSONDecodeError as exc:
            raise PeerFormatError(f"invalid JSON ({exc.msg}): the line is cut short or damaged", number) from None
        if not isinstance(item, dict):
            raise PeerFormatError("expected a JSON object", number)
        out.append(_result(item, number))
    return out


def parse_rccl_csv(text: str) -> list[RcclResult]:
    """A header line of rccl-tests' field names, then one result per line."""
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise PeerFormatError("the file is empty") from None
    out = []
    for fields in reader:
        if not fields or not any(f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            raise PeerFormatError(f"{len(fields)} fields where the header has {len(header)}: the line is cut "
                                  "short or damaged", reader.line_num)
        out.append(_result(dict(zip(header, fields, strict=True)), reader.line_num))
    return out
