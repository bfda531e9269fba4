"""A collective's two modes never join one history: the same case key timed `isolated` for a month
(as every collective stored before the modes existed was) and then `stream` (the default since)
starts a new segment, never a regression, whichever way the regression check reads the history
(the frame, the database, the history page's columns), even where the stored pace did not change
(a database migrated to revision 0010 before its pace backfill); the same jump within one mode is
flagged."""
from __future__ import annotations

from pathlib import Path

import pytest

from rooflab.db.series_query import history_columns
from rooflab.reports.regressions.columns_source import verdicts_of_history
from rooflab.reports.regressions.database_check import load_verdicts
from rooflab.reports.regressions.gate import SeriesVerdict
from rooflab.reports.regressions.series import detect
from tests.reports.synth import collective, frame, noisy, write_db


def _history(modes: list[str], seed: int) -> list[dict]:
    """30 nights of all_reduce at 4 KiB on 2 gloo ranks about 0.5 ms, then two nights 3x slower (what
    stream mode reads there against isolated on a 2-core machine), each night in `modes[i]`."""
    values = noisy(32, 0.5, 0.01, seed)
    values[-2:] = [v * 3 for v in values[-2:]]
    return [collective("all_reduce", 1024, 2, median_ms=v, dtype="float32", backend="gloo", run_id=f"run-{i + 1:04d}",
                       run_order=i + 1, collective_mode=mode, pace="back_to_back")
            for i, (v, mode) in enumerate(zip(values, modes, strict=True))]


def _only(verdicts: list[SeriesVerdict]) -> SeriesVerdict:
    assert len(verdicts) == 1
    return verdicts[0]


@pytest.mark.parametrize("seed", [1, 2])
def test_isolated_then_stream_at_the_same_case_is_a_new_segment_not_a_regression(tmp_path: Path, seed: int) -> None:
    rows = _history(["isolated"] * 30 + ["stream"] * 2, seed)
    assert len({r["case_key"] for r in rows}) == 1  # one case key, as the default mode keeps it
    url = f"sqlite:///{tmp_path / 'h.db'}"
    write_db(url, rows)
    for v in (_only(detect(frame(rows))), _only(load_verdicts(url)), _only(verdicts_of_history(history_columns(url)))):
        assert not v.flagged and v.status == "insufficient_data", v.status
        assert v.segment_start_run == "run-0031" and not v.change_points


@pytest.mark.parametrize("seed", [1, 2])
def test_the_same_jump_within_one_mode_is_flagged(tmp_path: Path, seed: int) -> None:
    rows = _history(["stream"] * 32, seed)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    write_db(url, rows)
    for v in (_only(detect(frame(rows))), _only(load_verdicts(url))):
        assert v.flagged and v.status == "regression", v.status
