"""Which runs make a night (db/nights.py)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rooflab.db.nights import group_nights

T0 = datetime(2026, 5, 1, 1, 0, tzinfo=UTC)


def test_runs_within_a_day_of_the_newest_make_a_night() -> None:
    hours = [0, 0.1, 0.3, 23, 24.2, 30, 47.5]  # 24.2 h is within 24 h of 47.5 h, 23 h is not
    starts = [T0 + timedelta(hours=h) for h in hours]
    nights = group_nights(starts[::-1])  # any order
    assert [sorted(hours[len(hours) - 1 - i] for i in n.runs) for n in nights] == [[24.2, 30, 47.5], [0, 0.1, 0.3, 23]]
    assert [n.index for n in nights] == [0, 1]
    assert nights[0].first_started_at == starts[4] and nights[0].last_started_at == starts[6]


def test_at_picks_the_night_of_the_newest_run_before_it() -> None:
    starts = [T0 + timedelta(days=d, minutes=m) for d in range(5) for m in (0, 7)]
    nights = group_nights(starts, at=T0 + timedelta(days=2, hours=5))
    assert len(nights) == 3
    assert nights[0].last_started_at == T0 + timedelta(days=2, minutes=7)
    assert group_nights(starts, at=T0 - timedelta(days=1)) == []
    assert group_nights([]) == []


def test_a_shorter_night() -> None:
    starts = [T0, T0 + timedelta(hours=5), T0 + timedelta(hours=10)]
    assert [len(n.runs) for n in group_nights(starts, hours=6)] == [2, 1]
