"""A result's way of measuring (flush method, pace) is part of what makes two results comparable: a
series whose method changes starts a new segment, never a regression, an improvement or a change
point, and a failed night (no method recorded) does not break a segment."""
from __future__ import annotations

import pytest

from rooflab.reports.regressions.series import detect
from rooflab.reports.regressions.verdicts import should_fail
from tests.reports.synth import frame, history, noisy


def _only(verdicts):
    assert len(verdicts) == 1
    return verdicts[0]


def _nights(seed: int, *, step: float) -> list[float]:
    """30 quiet nights, then the newest two `step` times slower."""
    values = noisy(32, 1.0, 0.005, seed)
    values[-2:] = [v * step for v in values[-2:]]
    return values


@pytest.mark.parametrize("column, old, new", [("flush_method", "read_sweep", "write_sweep"),
                                              ("pace", "back_to_back", "idle")])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_newest_two_nights_measured_another_way_raise_no_alert(column, old, new, seed):
    rows = history(_nights(seed, step=1.06))
    for i, r in enumerate(rows):
        r[column] = new if i >= 30 else old
    v = _only(detect(frame(rows)))
    assert v.status == "insufficient_data" and "new environment segment" in v.note
    assert v.segment_start_run == "run-0031"
    assert not v.flagged and not v.change_points and v.drift is None
    assert not should_fail([v], "suspect")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_same_history_measured_one_way_alerts(seed):
    rows = history(_nights(seed, step=1.06))
    for r in rows:
        r["flush_method"] = "write_sweep"
    v = _only(detect(frame(rows)))
    assert v.status == "regression" and should_fail([v], "regression")


def test_a_failed_night_without_a_method_does_not_start_a_segment():
    rows = history(noisy(30, 1.0, 0.005, 4))
    rows[12].update(status="failed", median_ms=None, flush_method=None, pace=None)
    v = _only(detect(frame(rows)))
    assert v.status == "ok" and {p.segment for p in v.points} == {0}
    assert v.segment_start_run == "run-0001"


def test_a_hot_case_flushing_nothing_is_one_segment():
    v = _only(detect(frame(history(noisy(25, 1.0, 0.005, 5), cache="hot"))))
    assert v.status == "ok" and {p.segment for p in v.points} == {0}


def test_results_that_do_not_record_their_method_join_the_segment_that_follows():
    """Results stored before the method columns existed (no flush_method, no pace) are not a way of
    measuring of their own: the history runs on into the recorded ones without a new segment."""
    rows = history(noisy(30, 1.0, 0.005, 6))
    for i, r in enumerate(rows):
        if i < 15:
            r.update(flush_method=None, pace=None)
    v = _only(detect(frame(rows)))
    assert v.status == "ok" and {p.segment for p in v.points} == {0}
    rows[29]["flush_method"] = rows[28]["flush_method"] = "read_sweep"  # a recorded change still counts
    assert _only(detect(frame(rows))).segment_start_run == "run-0029"
