"""The rows a PostgreSQL `COPY ... TO STDOUT` sends, as a binary file a CSV reader (Arrow's, pandas')
reads block by block, whatever the size of the copy."""
from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from psycopg import Connection
    from psycopg.rows import TupleRow

Chunk = bytes | bytearray | memoryview  # what a COPY's iteration gives


class CopyStream(io.RawIOBase):
    """The chunks of a COPY TO STDOUT as a file Arrow reads."""

    def __init__(self, chunks: Iterator[Chunk]) -> None:
        self._chunks = chunks
        self._rest = memoryview(b"")

    def readable(self) -> bool:
        return True

    def empty(self) -> bool:
        """Whether the COPY wrote nothing (reads its first chunk to tell)."""
        if not self._rest:
            self._rest = memoryview(bytes(next(self._chunks, b"")))
        return not self._rest

    def readinto(self, buffer: WriteableBuffer) -> int:
        """Fills `buffer` but at the end (a COPY sends a row a chunk; Arrow makes a block of each read)."""
        target = memoryview(buffer).cast("B")
        want, parts, have = len(target), [bytes(self._rest)], len(self._rest)
        while have < want:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            parts.append(bytes(chunk))  # a copy: psycopg reuses the chunk's memory for the next one
            have += len(chunk)
        data = b"".join(parts)
        n = min(want, len(data))
        target[:n] = data[:n]
        self._rest = memoryview(data)[n:]
        return n


@contextmanager
def copied_csv(driver_connection: Connection[TupleRow] | None, sql: str,
               null: str | None = None) -> Iterator[io.BufferedReader | None]:
    """The rows of the query `sql` on a psycopg connection (a pooled connection's `driver_connection`),
    by `COPY (sql) TO STDOUT` as CSV (NULL written as `null` where given, else as an empty field), as
    a file to read; None when the query gives no row."""
    if driver_connection is None:
        raise RuntimeError("COPY needs an open psycopg connection")
    options = "FORMAT csv" + (f", NULL '{null}'" if null is not None else "")
    cursor = driver_connection.cursor()
    with cursor, cursor.copy(f"COPY ({sql}) TO STDOUT ({options})") as copy:
        stream = CopyStream(iter(copy))
        yield None if stream.empty() else io.BufferedReader(stream)
