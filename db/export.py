"""`rooflab export`: results as CSV, JSON Lines or Parquet, the export columns (docs/design.md)
first, streamed in chunks.

CSV and Parquet hold `params` and `throttle_reasons` as JSON strings; JSON Lines holds them as an
object and a list. Missing values are empty in CSV and null elsewhere. Rows are ordered by run
(started_at, run_id), then case key, cache, timing mode and device, so an export of the same
results is byte-identical whatever database it comes from.
"""
from __future__ import annotations

import csv
import gzip
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sqlalchemy import select

from rooflab.db import models, parquet_copy
from rooflab.db.columns import ALL_COLUMNS, COLUMN_KINDS, canonical_json, result_select
from rooflab.db.engine import make_engine
from rooflab.db.errors import DatabaseInputError
from rooflab.db.importer import detect_format
from rooflab.db.schema import require_current
from rooflab.db.timeparse import parse_since
from rooflab.db.types import ColumnValue
from rooflab.db.urls import normalize_url

if TYPE_CHECKING:  # pyarrow loads only for a Parquet export
    import pyarrow as pa

FORMATS = ("csv", "jsonl", "parquet")
CHUNK_ROWS = 20_000



def iter_records(url: str, *, run_id: str | None = None, since: str | date | datetime | None = None,
                 chunk_rows: int = CHUNK_ROWS) -> Iterator[list[dict[str, ColumnValue]]]:
    """Chunks of result records (column -> Python value), in export order."""
    query = result_select()
    if run_id is not None:
        query = query.where(models.Run.run_id == run_id)
    if since is not None:
        query = query.where(models.Run.started_at >= parse_since(since))
    engine = make_engine(require_current(url), write=False)
    try:
        with engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=chunk_rows).execute(query)
            for partition in result.partitions(chunk_rows):
                yield [dict(zip(ALL_COLUMNS, row, strict=True)) for row in partition]
    finally:
        engine.dispose()


def csv_value(value: ColumnValue) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (dict, list, tuple)):
        return canonical_json(value if not isinstance(value, tuple) else list(value))
    return str(value)


def json_value(value: ColumnValue) -> ColumnValue:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return value


@contextmanager
def _text_output(out: Path | None, gzipped: bool) -> Iterator[IO[str]]:
    if out is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    if gzipped:
        with gzip.open(out, "wt", encoding="utf-8", newline="") as handle:
            yield handle
    else:
        with open(out, "w", encoding="utf-8", newline="") as handle:
            yield handle


def check_out(out: Path, fmt: str) -> bool:
    """Refuse an output name `rooflab import` would not read back as `fmt`, or a folder that cannot
    be written; returns whether the name asks for gzip."""
    allowed = f".{fmt} or .{fmt}.gz"
    try:
        named, gzipped = detect_format(out)
    except DatabaseInputError:
        raise DatabaseInputError(
            f"--out {out}: with --format {fmt} the name must end in {allowed} (the names `rooflab import` reads)"
        ) from None
    if named != fmt:
        raise DatabaseInputError(f"--out {out}: the name says {named} but --format is {fmt}; end it in {allowed}")
    folder = out.parent
    if not folder.exists():
        raise DatabaseInputError(f"--out {out}: directory {folder} does not exist")
    if not folder.is_dir():
        raise DatabaseInputError(f"--out {out}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DatabaseInputError(f"--out {out}: directory {folder} is not writable")
    if out.is_dir():
        raise DatabaseInputError(f"--out {out}: is a directory")
    return gzipped


def check_run(url: str, run_id: str) -> None:
    """Refuse a `--run` the database does not hold, naming the newest runs it does."""
    engine = make_engine(require_current(url), write=False)
    try:
        with engine.connect() as conn:
            if conn.scalar(select(models.Run.id).where(models.Run.run_id == run_id)) is not None:
                return
            newest = list(conn.scalars(select(models.Run.run_id).order_by(models.Run.started_at.desc()).limit(5)))
    finally:
        engine.dispose()
    shown = ", ".join(newest) if newest else "none"
    raise DatabaseInputError(f"--run {run_id}: no such run in the database; newest runs: {shown}")


def export(url: str, fmt: str, out: Path | None = None, *, run_id: str | None = None,
           since: str | date | datetime | None = None) -> int:
    """Write the results to `out` (stdout when None, csv/jsonl only); returns the number of rows.

    Everything is checked before a byte is written: the format, the output name (its suffix must
    be the format's, `.gz` compresses), the folder, the database and the run. A file is written
    under a temporary name and renamed when complete, so a failure leaves no half-written file.
    """
    if fmt not in FORMATS:
        raise DatabaseInputError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "parquet" and out is None:
        raise DatabaseInputError("--format parquet needs --out FILE (Parquet is not written to stdout)")
    gzipped = check_out(out, fmt) if out is not None else False
    since_value = parse_since(since) if since is not None else None
    require_current(url)
    if run_id is not None:
        check_run(url, run_id)
    chunks = iter_records(url, run_id=run_id, since=since_value)
    if out is None:
        return _write_text(chunks, fmt, None, False)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        if fmt == "parquet" and normalize_url(url).get_backend_name() == "postgresql":
            count = _parquet_by_copy(url, partial, gzipped, run_id, since_value)
        elif fmt == "parquet":
            count = _write_parquet(chunks, partial, gzipped)
        else:
            count = _write_text(chunks, fmt, partial, gzipped)
        partial.replace(out)
    except OSError as exc:
        raise DatabaseInputError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return count


def _write_text(chunks: Iterator[list[dict[str, Any]]], fmt: str, out: Path | None, gzipped: bool) -> int:
    count = 0
    with _text_output(out, gzipped) as handle:
        if fmt == "csv":
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(ALL_COLUMNS)
            for chunk in chunks:
                writer.writerows([csv_value(record[name]) for name in ALL_COLUMNS] for record in chunk)
                count += len(chunk)
        else:
            for chunk in chunks:
                handle.write("".join(
                    json.dumps({name: json_value(record[name]) for name in ALL_COLUMNS}, separators=(",", ":"))
                    + "\n"
                    for record in chunk
                ))
                count += len(chunk)
    return count


def parquet_schema() -> pa.Schema:
    import pyarrow as pa

    types = {
        "str": pa.string(), "datetime": pa.timestamp("us", tz="UTC"), "int": pa.int64(),
        "float": pa.float64(), "bool": pa.bool_(), "object": pa.string(), "list": pa.string(),
    }
    return pa.schema([pa.field(name, types[COLUMN_KINDS[name].kind]) for name in ALL_COLUMNS])


def _parquet_sink(out: Path, gzipped: bool, write: Callable[[Any], int]) -> int:
    """`write(sink)` into `out`: Parquet (zstd inside); with `gzipped` the whole file is also
    gzip-compressed, as `rooflab import` reads a `.parquet.gz`."""
    import pyarrow as pa

    if not gzipped:
        return write(out)
    with pa.CompressedOutputStream(str(out), "gzip") as sink:
        return write(sink)


def _write_parquet(chunks: Iterator[list[dict[str, Any]]], out: Path, gzipped: bool = False) -> int:
    schema = parquet_schema()
    json_columns = [name for name in ALL_COLUMNS if COLUMN_KINDS[name].kind in ("object", "list")]
    return _parquet_sink(out, gzipped, lambda sink: _parquet_chunks(chunks, sink, schema, json_columns))


def _parquet_by_copy(url: str, out: Path, gzipped: bool, run_id: str | None, since: datetime | None) -> int:
    """PostgreSQL's results as Parquet through COPY (db/parquet_copy.py): the same file, streamed."""
    engine = make_engine(require_current(url), write=False)
    try:
        with engine.connect() as conn:
            return _parquet_sink(out, gzipped, lambda sink: parquet_copy.write(
                conn, sink, parquet_schema(), run_id=run_id, since=since))
    finally:
        engine.dispose()


def _parquet_chunks(chunks: Iterator[list[dict[str, Any]]], sink: Any, schema: Any, json_columns: list[str]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = 0
    with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
        wrote = False
        for chunk in chunks:
            columns = {name: [record[name] for record in chunk] for name in ALL_COLUMNS}
            for name in json_columns:
                columns[name] = [None if v is None else canonical_json(list(v) if isinstance(v, tuple) else v)
                                 for v in columns[name]]
            writer.write_table(pa.table(columns, schema=schema))
            count += len(chunk)
            wrote = True
        if not wrote:
            writer.write_table(schema.empty_table())
    return count


__all__ = ["FORMATS", "export", "check_out", "check_run", "iter_records", "csv_value", "canonical_json",
           "parquet_schema"]
