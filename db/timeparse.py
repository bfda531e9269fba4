"""Parsing the dates and durations users type (`--since 2026-01-01`, `--samples-older-than 90d`)."""
from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from rooflab.db.errors import DatabaseInputError

_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")
# Each unit says what it is: `m` could be minutes or months, so it is not one of them.
DURATION_UNITS = {
    "s": timedelta(seconds=1), "min": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1),
    "w": timedelta(weeks=1), "mo": timedelta(days=30), "y": timedelta(days=365),
}
_ALLOWED = "s, min, h, d, w, mo (30 days) or y (365 days)"

# what `--since` may be given as: the text a user typed, or a date or time from Python
Since = str | date | datetime | None


def parse_duration(text: str, *, option: str = "duration") -> timedelta:
    """`90d`, `12h`, `2w`, `30min`, `6mo`, `1y`, `45s` -> timedelta; anything else (`1m` too: minutes or
    months?) raises DatabaseInputError naming the units allowed."""
    match = _DURATION.match((text or "").lower())
    if match and match.group(2) == "m":
        raise DatabaseInputError(
            f"{option} {text!r}: 'm' is ambiguous; write {match.group(1)}min for minutes or {match.group(1)}mo for "
            f"months (30 days); units: {_ALLOWED}"
        )
    if not match or match.group(2) not in DURATION_UNITS or int(match.group(1)) <= 0:
        raise DatabaseInputError(
            f"{option} {text!r}: expected a positive whole number with a unit {_ALLOWED} (e.g. 90d, 6mo)"
        )
    return int(match.group(1)) * DURATION_UNITS[match.group(2)]


def parse_since(value: Since, *, option: str = "--since") -> datetime | None:
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
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
