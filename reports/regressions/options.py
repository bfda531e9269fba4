"""The settings of the regression check, with their defaults in one place.

`rooflab regressions`, `rooflab nightly`, `reports.regressions.database_check.load_verdicts` and the nightly history
check (reports.regressions.nightly_check) all take a `RegressionOptions`; the command-line flags build one.
This module imports nothing heavy, so the CLI can read the defaults for its help text.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rooflab.vocab import SeriesBy

WINDOW = 30  # baseline: the last WINDOW good points
Z_THRESHOLD = 4.0  # a point is flagged above this robust z-score ...
MIN_CHANGE = 0.05  # ... and above this relative change (0.05 = 5 %)
MIN_BASELINE = 5  # fewer good points before the newest two: insufficient_data


@dataclass(frozen=True)
class RegressionOptions:
    """How the gate and the history pass of reports.regressions.gate judge a series."""

    window: int = WINDOW
    z_threshold: float = Z_THRESHOLD
    min_change: float = MIN_CHANGE
    min_baseline: int = MIN_BASELINE
    by: SeriesBy = SeriesBy.DEVICE  # a series per physical device, or per model (the aggregate)

    def as_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of reports.regressions.series.detect and
        reports.regressions.database_check.detect_in_database."""
        return asdict(self)

    def gate_kwargs(self) -> dict[str, Any]:
        """as_kwargs without `by`: reports.regressions.database_check.detect_with's (its source keys the series)."""
        return {k: v for k, v in asdict(self).items() if k != "by"}
