"""The rows a PostgreSQL `COPY ... TO STDOUT` sends, as a binary file a CSV reader (Arrow's, pandas')
reads block by block, whatever the size of the copy."""
from __future__ import annotations

import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

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
