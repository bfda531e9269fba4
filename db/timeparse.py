"""Parsing the dates and durations users type (`--since 2026-01-01`, `--samples-older-than 90d`)."""
from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone

from db.errors import DatabaseInputError

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str, *, option: str = "duration") -> timedelta:
    """`90d`, `12h`, `2w`, `30m`, `45s` -> timedelta; anything else raises DatabaseInputError."""
    match = _DURATION.match(text or "")
    if not match or int(match.group(1)) <= 0:
        raise DatabaseInputError(
            f"{option} {text!r}: expected a positive whole number with a unit s, m, h, d or w (e.g. 90d)"
        )
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def parse_since(value: str | date | datetime | None, *, option: str = "--since") -> datetime | None:
    """A date or ISO datetime -> aware UTC datetime (a date means its midnight UTC; naive means UTC)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime(value.year, value.month, value.day)
    else:
        try:
            parsed = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise DatabaseInputError(
                f"{option} {value!r}: expected a date (2026-01-31) or an ISO datetime (2026-01-31T12:00:00+00:00)"
            ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)
