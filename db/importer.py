"""`rooflab import`: read an export (CSV, JSON Lines or Parquet, optionally .gz) back into a database.

The whole file is read and validated before anything is written; then everything is loaded in
one transaction. A malformed file raises DatabaseInputError naming the file, the line (or row)
and the column, and leaves the database untouched. Results already present are skipped, so
importing the same file twice adds nothing.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from rooflab.db import models
from rooflab.db.columns import (
    ALL_COLUMNS,
    COLUMN_KINDS,
    EXPORT_COLUMNS,
    TABLE_KEYS,
    ColumnKind,
    joined_fields,
    table_row,
)
from rooflab.db.engine import retry_locked
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import open_for_writing
from rooflab.db.load import Batch, LoadCounts, load
from rooflab.db.measurement_columns import device_key, measurement_column_names, rates_of
from rooflab.db.shards import parse_shard
from rooflab.db.types import ColumnValue
from rooflab.record import byte_split_problem
from rooflab.vocab import CollectiveMode, Pace, ResultStatus, RunStatus

T = TypeVar("T")

_ENUMS = {"status": tuple(ResultStatus), "run_status": tuple(RunStatus)}
# what names a run, a device and a case in a row, and the fields of the row that must agree wherever it recurs
_IDENTITIES = tuple((kind, key, tuple(name for name in joined_fields(table) if name != key))
                    for kind, table, key in (("run", models.Run, TABLE_KEYS[models.Run]),
                                             ("case", models.Case, TABLE_KEYS[models.Case]),
                                             ("device", models.Environment, TABLE_KEYS[models.Environment])))


class _Bad(Exception):
    """A value that does not fit its column (message only; the caller adds where)."""


@dataclass(frozen=True)
class ImportResult:
    path: Path
    rows: int
    counts: LoadCounts


def detect_format(path: Path) -> tuple[str, bool]:
    """(format, gzipped) from the file name: .csv, .jsonl/.ndjson, .parquet, optionally + .gz."""
    name = path.name.lower()
    gzipped = name.endswith(".gz")
    if gzipped:
        name = name[:-3]
    for suffix, fmt in ((".csv", "csv"), (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".parquet", "parquet")):
        if name.endswith(suffix):
            return fmt, gzipped
    raise DatabaseInputError(
        f"{path}: cannot tell the format from the name; expected .csv, .jsonl or .parquet (optionally .gz)"
    )


# -- values -------------------------------------------------------------------------------------

def _parse_value(name: str, value: Any, from_text: bool) -> Any:
    """The value of column `name` as the database stores it, from a file's `value` (text when
    `from_text`: a CSV field); _Bad says what is wrong with it."""
    spec = COLUMN_KINDS[name]
    if value is None or (from_text and value == "" and spec.kind != "str"):
        if spec.nullable:
            return None
        raise _Bad("is missing (a value is required)")
    if spec.kind == "str":
        return _parse_str(name, value, spec)
    if spec.kind in ("object", "list"):
        return _parse_json(value, spec.kind)
    return _PARSERS[spec.kind](value)


def _parse_str(name: str, value: Any, spec: ColumnKind) -> str | None:
    if not isinstance(value, str):
        raise _Bad(f"{value!r} is not a string")
    if value == "":
        if spec.nullable:
            return None
        if spec.default != "":
            raise _Bad("is empty (a value is required)")
    if name in _ENUMS and value not in _ENUMS[name]:
        raise _Bad(f"{value!r} is not one of {', '.join(_ENUMS[name])}")
    if name == "shard" and value:
        try:
            parse_shard(value)
        except DatabaseInputError as exc:
            raise _Bad(str(exc)) from None
    return value


def _parse_datetime(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise _Bad(f"{value!r} is not an ISO 8601 timestamp") from None
    if not isinstance(value, datetime):
        raise _Bad(f"{value!r} is not a timestamp")
    if value.tzinfo is None or value.utcoffset() is None:
        raise _Bad(f"{value.isoformat()!r} has no time zone (write e.g. +00:00)")
    return value


def _parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _Bad(f"{value!r} is not a whole number")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise _Bad(f"{value!r} is not a whole number") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise _Bad(f"{value!r} is not a whole number")
    if value < 0:
        raise _Bad(f"{value} is negative")
    return value


def _parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise _Bad(f"{value!r} is not a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _Bad(f"{value!r} is not a number") from None
    if not isinstance(value, (int, float)):
        raise _Bad(f"{value!r} is not a number")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise _Bad(f"{value!r} is not a finite number")
    return value


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise _Bad(f"{value!r} is not true or false")


def _parse_json(value: Any, kind: str) -> Any:
    """A JSON object (kind "object") or a JSON list of strings (kind "list"), or its text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _Bad(f"{value[:60]!r} is not valid JSON ({exc.msg})") from None
    if kind == "object":
        if not isinstance(value, dict):
            raise _Bad("is not a JSON object")
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Bad("is not a JSON list of strings")
    return value


_PARSERS: dict[str, Callable[[Any], Any]] = {"datetime": _parse_datetime, "int": _parse_int, "float": _parse_float,
                                            "bool": _parse_bool}


# per column: its name, the Python type a typed file (Parquet, JSON) gives a value of its kind in when
# nothing but that kind is checked (None: an enum, a shard, a time, JSON), and whether it may be null
_PLAIN = {"str": str, "float": float, "int": int, "bool": bool}
_PLAN = tuple((name, None if name in (*_ENUMS, "shard") else _PLAIN.get(COLUMN_KINDS[name].kind),
               COLUMN_KINDS[name].nullable) for name in ALL_COLUMNS)
_INF = math.inf


def _record(raw: dict[str, Any], where: str, from_text: bool) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for name, plain, nullable in _PLAN:
        if name not in raw:
            if name in EXPORT_COLUMNS:
                raise DatabaseInputError(f"{where}: column {name!r} is missing")
            default = COLUMN_KINDS[name].default
            record[name] = list(default) if isinstance(default, tuple) else default
            continue
        value = raw[name]
        if not from_text:  # a typed file's value already null or of its column's kind: checked here, inline
            kind = type(value)
            if (value is None and nullable) or (kind is plain and (
                    value != "" if kind is str else -_INF < value < _INF if kind is float
                    else value >= 0 if kind is int else True)):
                record[name] = value
                continue
        try:
            record[name] = _parse_value(name, value, from_text)
        except _Bad as exc:
            raise DatabaseInputError(f"{where}, column {name!r}: {exc}") from None
    if "collective_mode" not in raw:
        _collective_before_modes(record)
    problem = byte_split_problem(record["bytes"], record["bytes_read"], record["bytes_written"])
    if problem:
        raise DatabaseInputError(f"{where}, columns 'bytes_read' and 'bytes_written': {problem}")
    return record


def _collective_before_modes(record: dict[str, Any]) -> None:
    """A collective (`ranks` set) in a file written before its mode was recorded was timed
    `isolated`, one call after a barrier per sample, as revision 0010 says of the rows it backfills."""
    if record.get("ranks") is None:
        return
    record["collective_mode"] = CollectiveMode.ISOLATED.value
    if record.get("pace") == Pace.BACK_TO_BACK:
        record["pace"] = Pace.BARRIER.value


# -- readers ------------------------------------------------------------------------------------

def _check_header(path: Path, header: list[str], where: str) -> None:
    missing = [name for name in EXPORT_COLUMNS if name not in header]
    if missing:
        raise DatabaseInputError(f"{path}: {where}: column {missing[0]!r} is missing (required: "
                                 f"{', '.join(EXPORT_COLUMNS)})")
    unknown = [name for name in header if name not in COLUMN_KINDS]
    if unknown:
        raise DatabaseInputError(f"{path}: {where}: unknown column {unknown[0]!r}")
    duplicated = sorted({name for name in header if header.count(name) > 1})
    if duplicated:
        raise DatabaseInputError(f"{path}: {where}: column {duplicated[0]!r} appears twice")


def _open_text(path: Path, gzipped: bool) -> io.TextIOBase:
    if gzipped:
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _read_csv(path: Path, gzipped: bool) -> Iterator[dict[str, Any]]:
    with _open_text(path, gzipped) as handle:
        reader = csv.reader(handle, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            raise DatabaseInputError(f"{path}: the file is empty (no header line)") from None
        _check_header(path, header, "line 1 (header)")
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise DatabaseInputError(
                    f"{path}: line {reader.line_num}: malformed CSV ({exc}; truncated line?)") from None
            where = f"{path}: line {reader.line_num}"
            if not fields:
                continue
            if len(fields) != len(header):
                raise DatabaseInputError(f"{where}: expected {len(header)} fields, "
                                         f"found {len(fields)} (truncated line?)")
            yield _record(dict(zip(header, fields, strict=True)), where, from_text=True)


def _read_jsonl(path: Path, gzipped: bool) -> Iterator[dict[str, Any]]:
    with _open_text(path, gzipped) as handle:
        for number, line in enumerate(handle, start=1):
            where = f"{path}: line {number}"
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatabaseInputError(
                    f"{where}: invalid JSON ({exc.msg} at column {exc.colno}; truncated line?)") from None
            if not isinstance(raw, dict):
                raise DatabaseInputError(f"{where}: expected a JSON object, found {type(raw).__name__}")
            unknown = [name for name in raw if name not in COLUMN_KINDS]
            if unknown:
                raise DatabaseInputError(f"{where}: unknown column {unknown[0]!r}")
            yield _record(raw, where, from_text=False)


def _read_parquet(path: Path, gzipped: bool) -> Iterator[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    source: Any = path
    if gzipped:
        source = pa.BufferReader(gzip.decompress(path.read_bytes()))
    try:
        parquet = pq.ParquetFile(source)
        header = list(parquet.schema_arrow.names)
    except (pa.ArrowException, OSError) as exc:
        raise DatabaseInputError(f"{path}: not a readable Parquet file ({exc})") from None
    _check_header(path, header, "schema")
    row = 0
    try:
        for batch in parquet.iter_batches(batch_size=20_000):
            for raw in batch.to_pylist():
                row += 1
                yield _record(raw, f"{path}: row {row}", from_text=False)
    except (pa.ArrowException, OSError) as exc:
        raise DatabaseInputError(f"{path}: row {row + 1}: unreadable Parquet data ({exc})") from None


_READERS = {"csv": _read_csv, "jsonl": _read_jsonl, "parquet": _read_parquet}


def read_file(path: Path) -> list[dict[str, ColumnValue]]:
    """Every row of an export file, validated; raises DatabaseInputError on the first problem."""
    if not path.is_file():
        raise DatabaseInputError(f"{path}: no such file")
    fmt, gzipped = detect_format(path)
    try:
        return list(_READERS[fmt](path, gzipped))
    except UnicodeDecodeError as exc:
        raise DatabaseInputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DatabaseInputError(f"{path}: damaged or truncated gzip data ({exc})") from None
    except csv.Error as exc:
        raise DatabaseInputError(f"{path}: malformed CSV ({exc})") from None


# -- batch --------------------------------------------------------------------------------------

def build_batch(path: Path, records: Sequence[Mapping[str, ColumnValue]]) -> Batch:
    """Turn validated records into a Batch; rows that disagree about a run, case or device are refused."""
    batch = Batch()
    measured = measurement_column_names()
    seen: dict[str, dict[str, tuple[int, dict[str, ColumnValue]]]] = {kind: {} for kind, _, _ in _IDENTITIES}
    for index, rec in enumerate(records, start=1):
        for kind, key_name, fields in _IDENTITIES:
            key = _typed(rec, key_name, str)
            values = {name: rec[name] for name in fields}
            first = seen[kind].setdefault(key, (index, values))
            if first[1] != values:
                name = next(n for n in fields if first[1][n] != values[n])
                raise DatabaseInputError(
                    f"{path}: record {index}, column {name!r}: {values[name]!r} contradicts record {first[0]} "
                    f"({first[1][name]!r}) for the same {kind} {key!r}"
                )
        run_id, fingerprint = _typed(rec, "run_id", str), _typed(rec, "device_fingerprint", str)
        case_key = _typed(rec, "case_key", str)
        device_uuid = _typed(rec, "device_uuid", str, nullable=True)
        if run_id not in batch.runs:  # an export holds no spec text
            batch.runs[run_id] = {**table_row(models.Run, rec), "spec_text": ""}
        if fingerprint not in batch.environments:  # nor a device's identity fields
            batch.environments[fingerprint] = {**table_row(models.Environment, rec), "identity": {},
                                               "first_seen_at": rec["started_at"]}
        key = device_key(device_uuid, fingerprint)
        batch.run_environments.setdefault((run_id, fingerprint, key), {"device_uuid": device_uuid, "info": {}})
        if case_key not in batch.cases:
            batch.cases[case_key] = table_row(models.Case, rec)
        columns = {name: rec[name] for name in measured if name in rec}
        columns["device_key"] = key
        columns["measured_at"] = rec["measured_at"] or rec["started_at"]
        # the rates are derived from the figures as the store derives them, never taken from the file
        columns.update(rates_of(_typed(rec, "status", str), _typed(rec, "median_ms", float, nullable=True),
                                _typed(rec, "flops", int), _typed(rec, "bytes", int)))
        batch.measurements.append((run_id, case_key, fingerprint, columns, None))
    return batch


@overload
def _typed(rec: Mapping[str, ColumnValue], name: str, kind: type[T], *, nullable: Literal[False] = False) -> T: ...
@overload
def _typed(rec: Mapping[str, ColumnValue], name: str, kind: type[T], *, nullable: Literal[True]) -> T | None: ...
def _typed(rec: Mapping[str, ColumnValue], name: str, kind: type[T], *, nullable: bool = False) -> T | None:
    """A validated record's column `name` (`_record` parsed it to its kind: COLUMN_KINDS), as `kind`."""
    value = rec[name]
    if value is None and nullable:
        return None
    if not isinstance(value, kind):
        raise TypeError(f"column {name!r}: expected {kind.__name__}, got {value!r} (records come from _record)")
    return value


def import_file(url: str, path: Path) -> ImportResult:
    """Validate all of `path`, then load it into `url` in one transaction."""
    records = read_file(path)
    batch = build_batch(path, records)
    engine = open_for_writing(url)
    try:
        def run() -> LoadCounts:
            with engine.begin() as conn:
                return load(conn, batch)

        counts = retry_locked(run)
    finally:
        engine.dispose()
    return ImportResult(path=path, rows=len(records), counts=counts)
