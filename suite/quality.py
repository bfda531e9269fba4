"""Result quality: whether a measurement may be trusted, judged from its own samples and its machine.

- `noisy`: sampling stopped without converging (at `max_time` or `max_samples`, or because the
  noise estimate settled above the target: `noise_settled`) and the 95 % CI
  half-width of the median stayed above NOISY_REL_CI of the median (or there were too few samples
  for a CI at all);
- `contended`: something else was seen competing for the machine while the case ran (see
  runners/machine/contention.py for what is sampled and the bounds);
- `good`: neither.

A contended result that is also noisy is `contended` (the likely cause), with both reasons listed.
Results of either kind are kept and shown, marked, but never set a ceiling or enter a baseline.
This module is the one place the rule lives; the worker judges with it and the reports fall back on
it for results stored before quality was recorded.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rooflab.vocab import UNCONVERGED_STOPS, Quality

NOISY_REL_CI = 0.05  # CI95 half-width / median above which an unconverged result is noisy


def noisy(rel_ci_halfwidth: Any, stop_reason: Any) -> Any:
    """The noise rule: sampling stopped without converging (`UNCONVERGED_STOPS`) and the CI95
    half-width of the median is above NOISY_REL_CI or unknown (None or NaN: too few samples).

    Element-wise on arrays (a results table's columns: the reports judge results stored before
    quality was recorded with it) and on single values (the worker); a bool array, 0-d for scalars."""
    stops = np.asarray(stop_reason, dtype=object)
    unconverged = np.zeros(stops.shape, dtype=bool)
    for stop in UNCONVERGED_STOPS:
        unconverged |= stops == stop.value
    rel = np.asarray(rel_ci_halfwidth, dtype=float)  # None -> NaN
    return unconverged & ~(rel <= NOISY_REL_CI)


def noise_reasons(rel_ci_halfwidth: float | None, stop_reason: str | None) -> tuple[str, ...]:
    """Why a result is noisy (empty when it is not; the rule: `noisy`)."""
    if not bool(noisy(rel_ci_halfwidth, stop_reason)):
        return ()
    if rel_ci_halfwidth is None or rel_ci_halfwidth != rel_ci_halfwidth:
        return (f"stopped at {stop_reason} with too few samples for a confidence interval",)
    if rel_ci_halfwidth > NOISY_REL_CI:
        return (
            f"stopped at {stop_reason} with CI95 half-width {100 * rel_ci_halfwidth:.1f} % of the median "
            f"(bound {100 * NOISY_REL_CI:g} %)",
        )
    return ()


def judge(noise: Sequence[str], contention: Sequence[str]) -> tuple[Quality, tuple[str, ...]]:
    """(quality, reasons) from the noise and contention reasons."""
    reasons = tuple(contention) + tuple(noise)
    if contention:
        return Quality.CONTENDED, reasons
    if noise:
        return Quality.NOISY, reasons
    return Quality.GOOD, ()
