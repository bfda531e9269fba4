"""`rooflab export`: results as CSV, JSON Lines or Parquet, DESIGN's columns first, streamed in chunks.

CSV and Parquet hold `params` and `throttle_reasons` as JSON strings; JSON Lines holds them as an
object and a list. Missing values are empty in CSV and null elsewhere. Rows are ordered by run
(started_at, run_id), then case key, cache, timing mode and device, so an export of the same
results is byte-identical whatever database it comes from.
"""
from __future__ import annotations

import csv
import gzip
import json
import sys
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any, Iterator

from db import models
from db.columns import ALL_COLUMNS, COLUMN_KINDS, canonical_json, result_select
from db.engine import make_engine
from db.errors import DatabaseInputError
from db.schema import require_current
from db.timeparse import parse_since

FORMATS = ("csv", "jsonl", "parquet")
CHUNK_ROWS = 20_000



def iter_records(url: str, *, run_id: str | None = None, since: str | date | datetime | None = None,
                 chunk_rows: int = CHUNK_ROWS) -> Iterator[list[dict[str, Any]]]:
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
                yield [dict(zip(ALL_COLUMNS, row)) for row in partition]
    finally:
        engine.dispose()


def csv_value(value: Any) -> str:
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


def json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return value


@contextmanager
def _text_output(out: Path | None) -> Iterator[IO[str]]:
    if out is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    if out.name.endswith(".gz"):
        with gzip.open(out, "wt", encoding="utf-8", newline="") as handle:
            yield handle
    else:
        with open(out, "w", encoding="utf-8", newline="") as handle:
            yield handle


def export(url: str, fmt: str, out: Path | None = None, *, run_id: str | None = None,
           since: str | date | datetime | None = None) -> int:
    """Write the results to `out` (stdout when None, csv/jsonl only); returns the number of rows."""
    if fmt not in FORMATS:
        raise DatabaseInputError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "parquet" and out is None:
        raise DatabaseInputError("--format parquet needs --out FILE (Parquet is not written to stdout)")
    if out is not None and not out.parent.exists():
        raise DatabaseInputError(f"--out {out}: directory {out.parent} does not exist")
    since_value = parse_since(since) if since is not None else None
    chunks = iter_records(url, run_id=run_id, since=since_value)
    if fmt == "parquet":
        return _write_parquet(chunks, out)  # type: ignore[arg-type]
    count = 0
    with _text_output(out) as handle:
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


def parquet_schema():  # type: ignore[no-untyped-def]
    import pyarrow as pa

    types = {
        "str": pa.string(), "datetime": pa.timestamp("us", tz="UTC"), "int": pa.int64(),
        "float": pa.float64(), "bool": pa.bool_(), "object": pa.string(), "list": pa.string(),
    }
    return pa.schema([pa.field(name, types[COLUMN_KINDS[name].kind]) for name in ALL_COLUMNS])


def _write_parquet(chunks: Iterator[list[dict[str, Any]]], out: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    json_columns = [name for name in ALL_COLUMNS if COLUMN_KINDS[name].kind in ("object", "list")]
    count = 0
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
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



__all__ = ["FORMATS", "export", "iter_records", "csv_value", "canonical_json", "parquet_schema"]
