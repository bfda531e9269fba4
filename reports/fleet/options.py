"""What `rooflab fleet` is asked: the suite, the night, the thresholds and how much history to pool.

Each value is checked here once; a bad one is a ValueError naming the option, what it got and what is
allowed, which the command line turns into exit 2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from rooflab.db.nights import NIGHT_HOURS

DEFAULT_SUITE = "health"


@dataclass(frozen=True)
class FleetOptions:
    """The judgement's settings (docs/fleet.md says what each changes)."""

    suite: str = DEFAULT_SUITE
    at: datetime | None = None  # judge the night of the newest run at or before this time (None: the newest)
    min_devices: int = 4  # a case is judged where at least this many devices of a model measured it
    warn_pct: float = 3.5  # slower than the fleet by this much (percent) is beyond the warn line
    drain_pct: float = 7.0  # ... and by this much beyond the drain line
    spread_nights: int = 14  # nights pooled for the robust spreads, tonight included
    history_nights: int = 14  # nights before tonight that make a device's own baseline and the fleet's
    night_hours: float = NIGHT_HOURS  # runs within this many hours of a night's newest make that night

    def __post_init__(self) -> None:
        _whole("--min-devices", self.min_devices, 2)
        _whole("--spread-nights", self.spread_nights, 1)
        _whole("--history-nights", self.history_nights, 1)
        for flag, value in (("--warn", self.warn_pct), ("--drain", self.drain_pct)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 < value < 100:
                raise ValueError(f"{flag} {value!r}: must be a percentage above 0 and below 100")
        if self.drain_pct <= self.warn_pct:
            raise ValueError(f"--drain {self.drain_pct:g} must be above --warn {self.warn_pct:g} (percent)")
        if not (math.isfinite(self.night_hours) and self.night_hours > 0):
            raise ValueError(f"night hours {self.night_hours!r}: must be a number of hours above 0")

    @property
    def nights_needed(self) -> int:
        """How many nights the judgement reads, tonight included: the spread's window, or tonight and
        the own baseline's nights, whichever is longer."""
        return max(self.spread_nights, self.history_nights + 1)


def _whole(flag: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{flag} {value!r}: must be a whole number >= {low}")
