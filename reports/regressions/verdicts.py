"""The fixed words of history checking: a series' verdict and the `--fail-on` choice.

A light module (no pandas) so that the nightly runner, the Slurm job writer and the CLI name the same
sets as `reports.regressions.gate` without loading it; and the exit policy (`should_fail`) on the verdicts.
"""
from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Protocol


class Verdict(StrEnum):
    """What the history check says of one series (case on one device)."""

    REGRESSION = "regression"  # the two newest results are confirmed slower than the baseline
    SUSPECT = "suspect"  # slower, but not confirmed (one point, or a point of doubtful quality)
    IMPROVEMENT = "improvement"  # the two newest results are faster than the baseline
    OK = "ok"
    INSUFFICIENT_DATA = "insufficient_data"  # too few good points for a baseline


ALERTS = frozenset({Verdict.REGRESSION, Verdict.SUSPECT})  # a series that may have got slower
# the kind of a listed series: a verdict that is shown, or a drift (a slow trend over the newest segment,
# judged apart from the verdict)
DRIFT = "drift"
SHOWN_VERDICTS = (Verdict.REGRESSION, Verdict.SUSPECT, Verdict.IMPROVEMENT)
FLAG_KINDS = (*SHOWN_VERDICTS, DRIFT)


class FailOn(StrEnum):
    """When a history check fails (exit 1)."""

    REGRESSION = "regression"  # a regression
    DRIFT = "drift"  # a regression or a drift
    SUSPECT = "suspect"  # a regression, a suspect or a drift: anything that may be slower
    NEVER = "never"

    @property
    def failing_kinds(self) -> frozenset[str]:
        """The flag kinds (FLAG_KINDS) that fail a check under this choice."""
        return {
            FailOn.REGRESSION: frozenset({Verdict.REGRESSION}),
            FailOn.DRIFT: frozenset({Verdict.REGRESSION, DRIFT}),
            FailOn.SUSPECT: frozenset({Verdict.REGRESSION, Verdict.SUSPECT, DRIFT}),
            FailOn.NEVER: frozenset(),
        }[self]

    def fails(self, verdict: str, drifting: bool) -> bool:
        """Does one series with this verdict (and drift, or not) fail the check?"""
        kinds = self.failing_kinds
        return verdict in kinds or (drifting and DRIFT in kinds)


def parse_fail_on(text: str, option: str = "--fail-on") -> FailOn:
    """The FailOn named by `text`; ValueError with one message naming what is allowed otherwise."""
    try:
        return FailOn(text)
    except ValueError:
        raise ValueError(
            f"{option} {text!r} is not allowed; allowed: {', '.join(FailOn)} "
            "(regression; drift: a regression or a drift; suspect: a regression, a suspect or a drift; never)"
        ) from None


class Judged(Protocol):
    """What the exit policy reads of a series' verdict (reports.regressions.gate.SeriesVerdict)."""

    @property
    def status(self) -> str: ...

    @property
    def drift(self) -> object | None: ...


def should_fail(verdicts: Iterable[Judged], fail_on: str) -> bool:
    """True when a verdict matches --fail-on (FailOn: regression; drift, a regression or a drift;
    suspect, a regression, a suspect or a drift: anything that may be slower; never)."""
    rule = FailOn(fail_on)
    return any(rule.fails(v.status, v.drift is not None) for v in verdicts)
