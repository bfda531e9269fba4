"""A Parquet export straight out of PostgreSQL: each run's results by COPY, parsed by Arrow, streamed.

The export's generic path (db/export.py `iter_records`) makes a Python object of every value of
every result: about 100 us a result, some 80 minutes for a fleet's year of 46.7 M. Here PostgreSQL
writes each run's results as CSV (`COPY (SELECT ...) TO STDOUT`), sorted as the export sorts them
(case key, cache, timing mode, device, in code point order: `COLLATE "C"`, as Python and SQLite
compare text), Arrow parses the stream block by block, the columns of the run, the case and the
device are joined on from tables read once (a distinct JSON text is made canonical once), and each
block goes out as a row group. A thread of its own reads the COPYs, run after run, a few blocks
ahead of the parser (`read_ahead`): PostgreSQL makes the next rows while Arrow parses and the writer
compresses the ones before, instead of each waiting on the other (docs/database.md: the export of a
fleet's year). Memory holds a few blocks, whatever the size of a run or of the year. The rows, their
order and their values are the generic path's (tests/db/test_parquet_copy.py).
"""
from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, select

from rooflab.db import models
from rooflab.db.columns import ALL_COLUMNS, COLUMN_KINDS, JOINED, canonical_json
from rooflab.db.copy_stream import CopyStream

if TYPE_CHECKING:  # pyarrow loads only for a Parquet export
    import pyarrow as pa
    from psycopg import Cursor
    from psycopg.rows import TupleRow

BLOCK_BYTES = 32 << 20  # CSV parsed (and written as one row group) at a time: ~50,000 results
AHEAD_BYTES = 8 << 20  # the COPY's rows handed to the parser together
AHEAD_BLOCKS = 16  # at most this many read ahead of the parser (128 MiB)
MEASURED = tuple(name for name in ALL_COLUMNS if name not in JOINED)  # the measurement's own columns
_KEYS = ("case_id", "environment_id")  # read beside them, to join the case's and the device's columns


def _sql_column(name: str) -> str:
    kind = COLUMN_KINDS[name].kind
    if kind == "datetime":  # whole microseconds since the epoch: exact, and no time zone text to parse
        return f'floor(extract(epoch FROM m."{name}") * 1000000)::bigint'
    if kind in ("object", "list"):
        return f'm."{name}"::text'
    return f'm."{name}"'


def run_query(run_pk: int) -> str:
    """The COPY of one run's results (`run_pk`: its `runs.id`), in the export's order."""
    columns = ", ".join([*(_sql_column(name) for name in MEASURED), *(f"m.{k}" for k in _KEYS)])
    order = ", ".join(f'{c} COLLATE "C"' for c in ("c.case_key", "m.cache", "m.timing_mode", "m.device_key"))
    return (f"COPY (SELECT {columns} FROM measurements m JOIN cases c ON c.id = m.case_id "
            f"WHERE m.run_id = {int(run_pk)} ORDER BY {order}) TO STDOUT (FORMAT csv)")


def _csv_options() -> tuple[Any, Any, Any]:
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    types = {"str": pa.string(), "object": pa.string(), "list": pa.string(), "int": pa.int64(),
             "float": pa.float64(), "bool": pa.bool_(), "datetime": pa.int64()}
    column_types = {name: types[COLUMN_KINDS[name].kind] for name in MEASURED}
    column_types.update({k: pa.int64() for k in _KEYS})
    return (pa_csv.ReadOptions(column_names=[*MEASURED, *_KEYS], block_size=BLOCK_BYTES),
            pa_csv.ParseOptions(newlines_in_values=True),
            pa_csv.ConvertOptions(column_types=column_types, strings_can_be_null=True,
                                  quoted_strings_can_be_null=False, null_values=[""], true_values=["t"],
                                  false_values=["f"]))


def _canonical(column: pa.Array) -> pa.Array:
    """JSON text in its one spelling (db/columns.py canonical_json), each distinct text converted once."""
    import pyarrow as pa

    encoded = column.dictionary_encode()
    spelled = pa.array([None if v is None else canonical_json(json.loads(v))
                        for v in encoded.dictionary.to_pylist()], pa.string())
    return spelled.take(encoded.indices)


def _dimension(conn: Connection, model: type[models.Base], schema: pa.Schema) -> tuple[pa.Table, np.ndarray]:
    """`model`'s columns of the results row, one row per id in id order, and id -> that row."""
    import pyarrow as pa

    names = [name for name, joined in JOINED.items() if joined.table is model]
    table = model.__table__
    rows = conn.execute(select(table.c.id, *(table.c[JOINED[n].attribute] for n in names)).order_by(table.c.id)).all()
    ids = np.array([row[0] for row in rows], dtype=np.int64)
    lookup = np.full(int(ids.max()) + 1 if len(ids) else 1, -1, dtype=np.int64)
    lookup[ids] = np.arange(len(ids))
    columns = {}
    for i, name in enumerate(names, start=1):
        values = [row[i] for row in rows]
        if COLUMN_KINDS[name].kind in ("object", "list"):
            values = [None if v is None else canonical_json(v) for v in values]
        columns[name] = pa.array(values, schema.field(name).type)
    return pa.table(columns), lookup


def _piece(batch: pa.RecordBatch, run: dict[str, Any], cases: tuple[pa.Table, np.ndarray],
           envs: tuple[pa.Table, np.ndarray], schema: pa.Schema) -> pa.Table:
    """One block of a run's results with every column of the export, typed as its schema."""
    import pyarrow as pa

    n = batch.num_rows
    case_rows = pa.array(cases[1][batch.column("case_id").to_numpy()])
    env_rows = pa.array(envs[1][batch.column("environment_id").to_numpy()])
    columns = []
    for field in schema:
        name, kind = field.name, COLUMN_KINDS[field.name].kind
        joined = JOINED.get(name)
        if joined is None:
            column = batch.column(name)
            if kind == "datetime":
                column = column.cast(pa.timestamp("us", tz="UTC"))
            elif kind in ("object", "list"):
                column = _canonical(column)
        elif joined.table is models.Run:
            column = pa.repeat(pa.scalar(run[name], field.type), n)
        elif joined.table is models.Case:
            column = cases[0].column(name).take(case_rows)
        else:
            column = envs[0].column(name).take(env_rows)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _runs(conn: Connection, run_id: str | None, since: datetime | None) -> list[dict[str, Any]]:
    """The runs to export in the export's order (start, then run id): their id and their columns of the row."""
    r = models.Run.__table__
    names = [name for name, joined in JOINED.items() if joined.table is models.Run]
    query = select(r.c.id, *(r.c[JOINED[n].attribute].label(n) for n in names))
    if run_id is not None:
        query = query.where(r.c.run_id == run_id)
    if since is not None:
        query = query.where(r.c.started_at >= since)
    rows = [dict(row._mapping) for row in conn.execute(query)]
    return sorted(rows, key=lambda row: (row["started_at"], row["run_id"]))


class _EndOfRun:
    """Put after the last block of a run's COPY."""


_END = _EndOfRun()
Ahead = bytes | _EndOfRun | BaseException  # what the reading thread hands over


def read_ahead(cursor: Cursor[TupleRow], queries: list[str], out: queue.Queue[Ahead], stop: threading.Event) -> None:
    """Each of `queries` (COPY ... TO STDOUT) on the psycopg `cursor`, its rows put into `out` in blocks
    of about AHEAD_BYTES, `_END` after each query, an exception instead if one is raised. Once `stop`
    is set (the parser failed, or is done) the COPY under way is read to its end and dropped (the
    connection is busy until then) and no other is started."""
    def put(item: Ahead) -> None:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    try:
        for sql in queries:
            if stop.is_set():
                return
            with cursor.copy(sql) as copy:
                parts: list[bytes] = []
                size = 0
                for chunk in copy:  # a row a chunk
                    if stop.is_set():
                        continue
                    parts.append(bytes(chunk))  # a copy: psycopg reuses the chunk's memory
                    size += len(chunk)
                    if size >= AHEAD_BYTES:
                        put(b"".join(parts))
                        parts, size = [], 0
                if parts:
                    put(b"".join(parts))
            put(_END)
    except BaseException as exc:  # noqa: BLE001 - raised again in the parser's thread
        put(exc)


def _blocks(ahead: queue.Queue[Ahead]) -> Iterator[bytes]:
    """One run's blocks as the reading thread hands them over; its exception raised here."""
    while True:
        item = ahead.get()
        if isinstance(item, _EndOfRun):
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def write(conn: Connection, sink: Path | pa.NativeFile, schema: pa.Schema, *, run_id: str | None = None,
          since: datetime | None = None) -> int:
    """Every result of the runs chosen (all; `run_id`; those started at or after `since`) as Parquet
    into `sink` (a path or an Arrow output stream); returns how many."""
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    runs = _runs(conn, run_id, since)
    cases, envs = _dimension(conn, models.Case, schema), _dimension(conn, models.Environment, schema)
    read, parse, convert = _csv_options()
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]  # psycopg's: COPY
    ahead: queue.Queue[Ahead] = queue.Queue(maxsize=AHEAD_BLOCKS)
    stop = threading.Event()
    reader = threading.Thread(target=read_ahead, args=(cursor, [run_query(run["id"]) for run in runs], ahead, stop),
                              name="rooflab-export-copy", daemon=True)
    count = 0
    with cursor:
        reader.start()
        try:
            with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
                for run in runs:
                    stream = CopyStream(_blocks(ahead))
                    if stream.empty():
                        continue
                    for batch in pa_csv.open_csv(stream, read_options=read, parse_options=parse,
                                                 convert_options=convert):
                        writer.write_table(_piece(batch, run, cases, envs, schema))
                        count += batch.num_rows
                if count == 0:
                    writer.write_table(schema.empty_table())
        finally:
            stop.set()
            reader.join()
            _release(ahead)
    return count


def _release(ahead: queue.Queue[Ahead]) -> None:
    """Ends the run whose blocks a CSV reader may still be waiting for (Arrow reads on a thread of its
    own; after a failure that read could otherwise wait for ever): the reading thread has stopped, so
    what it left is dropped and an end of run put in its place."""
    while True:
        try:
            ahead.get_nowait()
        except queue.Empty:
            break
    ahead.put_nowait(_END)
