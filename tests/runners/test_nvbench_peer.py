"""The nvbench peer's reading of nvbench's JSON (no GPU needed): known figures, per round, in order."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rooflab.runners.crosscheck.nvbench_peer import BENCHMARK_NAME, read_states, timing_from
from rooflab.runners.crosscheck.peer import PeerClock
from rooflab.vocab import CacheMode


def _summary(tag: str, value: float) -> dict:
    return {"tag": tag, "data": [{"name": "value", "type": "float64", "value": repr(value)}]}


def _write(tmp_path: Path, states: list[dict], name: str = BENCHMARK_NAME) -> Path:
    path = tmp_path / "nvbench.json"
    path.write_text(json.dumps({"benchmarks": [{"name": "other", "states": []}, {"name": name, "states": states}]}))
    return path


def test_each_round_is_one_state_in_order(tmp_path: Path) -> None:
    states = [
        {"is_skipped": False, "summaries": [_summary("nv/cold/time/gpu/median", 1.25e-4),
                                            _summary("nv/cold/time/gpu/mean", 9.0e-4),
                                            _summary("nv/batch/time/gpu/mean", 1.0e-4)]},
        {"is_skipped": False, "summaries": [_summary("nv/cold/time/gpu/mean", 2.5e-4),
                                            _summary("nv/batch/time/gpu/mean", 2.0e-4)]},
    ]
    read = read_states(_write(tmp_path, states))
    cold = [timing_from(s, CacheMode.COLD) for s in read]
    hot = [timing_from(s, CacheMode.HOT) for s in read]
    assert [t.median_ms for t in cold] == pytest.approx([0.125, 0.25])  # the median, else the mean
    assert {t.clock for t in cold} == {PeerClock.DEVICE_BLOCKED} and {t.cache for t in cold} == {CacheMode.COLD}
    assert [t.median_ms for t in hot] == pytest.approx([0.1, 0.2])
    assert {t.clock for t in hot} == {PeerClock.DEVICE_BATCH_MEAN}


def test_a_skipped_state_or_a_missing_figure_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="skipped the case: not enough memory"):
        read_states(_write(tmp_path, [{"is_skipped": True, "skip_reason": "not enough memory"}]))
    with pytest.raises(RuntimeError, match="no result"):
        read_states(_write(tmp_path, [], name="someone_else"))
    with pytest.raises(RuntimeError, match="no batch"):
        timing_from([_summary("nv/cold/time/gpu/median", 1e-4)], CacheMode.HOT)
    with pytest.raises(RuntimeError, match="no cold"):
        timing_from([_summary("nv/batch/time/gpu/mean", 1e-4)], CacheMode.COLD)
