"""Which results carry a performance figure: the one rule, for SQL expressions, pandas columns and
numpy arrays alike.

A result has a figure when its status is ok and its median is positive (`figure_mask`): only such a
result has a rate (db/rates.py, `rates_of`), a point in a series or on a chart. It is usable (may
set a roof, be diagnosed, compared or drawn as a device's result) when it has a figure and its
clock was not throttled (`usable_mask`). `is_ok` is the caller's own test of its status column
against ResultStatus.OK (a frame's strings, an SQL column, or the codes of db.series_query's
columns), so every reader states the rule through these functions, whatever holds its rows.
"""
from __future__ import annotations

from typing import TypeVar

M = TypeVar("M")  # a boolean mask: an SQL expression, a pandas Series or a numpy array (or one bool)


def figure_mask(is_ok: M, median_ms: object) -> M:
    """Rows with a performance figure: status ok (`is_ok`) and a positive median."""
    return is_ok & (median_ms > 0)  # type: ignore[operator]  # M: a mask that does & and a column that does >


def usable_mask(is_ok: M, median_ms: object, throttled: object) -> M:
    """Rows with a figure that was not taken at a throttled clock (`throttled`: a boolean mask)."""
    return figure_mask(is_ok, median_ms) & ~throttled  # type: ignore[operator]  # as figure_mask
