"""Column types shared by the models and the migrations, and the Python value of a column."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from sqlalchemy import BigInteger, DateTime, Integer
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

# What one column of a results row holds in Python (a measurement's own, or its run's, device's or
# case's; db/columns.py COLUMN_KINDS says which kind each column is): text, a whole number, a
# number, a flag, a time, a JSON object (params, identity) or list (throttle_reasons), or null.
ColumnValue = str | int | float | bool | datetime | Mapping[str, object] | Sequence[object] | None

# SQLite only auto-increments an `INTEGER PRIMARY KEY`; PostgreSQL gets a 64-bit key.
BigIntKey = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL stores `timestamptz`; SQLite, which has no time zones, stores the UTC wall time.
    Naive datetimes are refused on the way in; values always come back aware, in UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: object, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()} refused: timestamps must be timezone-aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: object, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # raw SQLite text (e.g. from a plain SQL insert)
            value = datetime.fromisoformat(value)
        if not isinstance(value, datetime):
            raise TypeError(f"expected a stored time, got {type(value).__name__}")
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
