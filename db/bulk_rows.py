"""Many rows into a table at once: PostgreSQL's COPY there, one batched INSERT elsewhere.

SQLAlchemy's batched INSERT spells every row's values into one statement (a thousand results are
52,000 parameters), and psycopg parses such a statement again each time it is sent: two thirds of
what writing a shard of a night cost. COPY sends the rows as data instead. The values are bound
exactly as an INSERT binds them (each column type's own bind processing: UTC times, JSON text), so
what is stored is the same either way.

`insert_new` is the insert that skips rows whose natural key is there already (the store's
`INSERT ... ON CONFLICT DO NOTHING`): on PostgreSQL the rows go by COPY into a temporary table of the
connection, then into the table with one `INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING`.
Fewer than `COPY_FROM` rows (a result stored on its own) go as one INSERT on every database: COPY's
three more round trips would cost them more than the statement does.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table

from rooflab.db.dialect import insert_ignore

COPY_FROM = 64
_RETURNING_INSERTS: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def _bound(conn: Connection, table: Table, columns: Sequence[str],
           rows: Sequence[Mapping[str, object]]) -> list[list[Any]]:
    """`rows` as tuples of `columns`, each value bound as an INSERT of `table` binds it."""
    dialect = conn.dialect
    processors: list[tuple[int, Callable[[Any], Any]]] = []
    for i, name in enumerate(columns):
        bind = table.c[name].type.dialect_impl(dialect).bind_processor(dialect)
        if bind is not None:
            processors.append((i, bind))
    out = []
    for row in rows:
        values = [row[name] for name in columns]
        for i, processor in processors:
            values[i] = processor(values[i])
        out.append(values)
    return out


def _copy(conn: Connection, target: str, columns: Sequence[str], values: list[list[Any]]) -> None:
    """COPY `values` into `target` (a table name) through the connection's psycopg cursor."""
    names = ", ".join(f'"{name}"' for name in columns)
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]  # psycopg's, on PostgreSQL
    with cursor, cursor.copy(f'COPY "{target}" ({names}) FROM STDIN') as copy:
        for value in values:
            copy.write_row(value)


def insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, object]]) -> None:
    """Insert `rows` (each with the same columns) into `table`."""
    if not rows:
        return
    if conn.dialect.name != "postgresql" or len(rows) < COPY_FROM:
        conn.execute(table.insert(), [dict(r) for r in rows])
        return
    columns = list(rows[0])
    _copy(conn, table.name, columns, _bound(conn, table, columns, rows))


def _staging(conn: Connection, table: Table) -> str:
    """The connection's temporary table for rows of `table` on their way in (emptied at each commit)."""
    name = f"rooflab_staged_{table.name}"
    conn.exec_driver_sql(f'CREATE TEMPORARY TABLE IF NOT EXISTS "{name}" ON COMMIT DELETE ROWS AS '
                         f'SELECT * FROM "{table.name}" WITH NO DATA')
    return name


def insert_new(conn: Connection, table: Table, rows: Sequence[Mapping[str, object]], key: Sequence[str],
               returning: Sequence[str]) -> list[tuple[object, ...]]:
    """Insert those of `rows` (each with the same columns, no two with the same `key`) whose natural
    key `key` (a unique constraint of `table`) the table lacks; returns `returning` of each inserted row."""
    if not rows:
        return []
    if conn.dialect.name != "postgresql" or len(rows) < COPY_FROM:
        # the values go as parameters: one statement per table, dialect and returning, built and compiled once
        cache_key = (conn.dialect.name, table.name, tuple(returning))
        if cache_key not in _RETURNING_INSERTS:
            _RETURNING_INSERTS[cache_key] = insert_ignore(conn, table).returning(*(table.c[n] for n in returning))
        return [tuple(row) for row in conn.execute(_RETURNING_INSERTS[cache_key], [dict(r) for r in rows])]
    columns = list(rows[0])
    staged = _staging(conn, table)
    _copy(conn, staged, columns, _bound(conn, table, columns, rows))
    names = ", ".join(f'"{c}"' for c in columns)
    new = [tuple(row) for row in conn.exec_driver_sql(
        f'INSERT INTO "{table.name}" ({names}) SELECT {names} FROM "{staged}" '
        f'ON CONFLICT ({", ".join(key)}) DO NOTHING RETURNING {", ".join(returning)}')]
    conn.exec_driver_sql(f'TRUNCATE "{staged}"')
    return new
