"""What `rooflab report`'s main process reads on a fleet's history (reports.pages.report_inputs): the
run counts grouped in the database, results' keys only where two models are compared (of the runs
shown when they were chosen), and the same inputs as from every result's keys."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rooflab.reports.data import reads
from rooflab.reports.pages import report_inputs
from tests.reports.synth import row, write_db

MODELS = {"NVIDIA H100 80GB HBM3": "fp-h100", "NVIDIA A100-SXM4-80GB": "fp-a100"}


def _db(tmp_path: Path, models: dict[str, str], rng: random.Random) -> str:
    rows = []
    for night in range(1, 7):
        for name, fingerprint in models.items():
            for n in rng.sample(range(1, 30), 12):  # a different dozen of cases each night and model
                rows.append(row(op="stream_triad", family="probe", params={"n": 1024 * n}, device_name=name,
                                fingerprint=fingerprint, median_ms=n * (1 + 0.01 * rng.random()), flops=2048 * n,
                                nbytes=12288 * n, run_id=f"run-{night:03d}", run_order=night,
                                status=rng.choice(["ok"] * 5 + ["failed"])))
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    write_db(url, rows)
    return url


def _same(a: report_inputs.ReportInputs, b: report_inputs.ReportInputs) -> None:
    pd.testing.assert_frame_equal(a.counts, b.counts)
    pd.testing.assert_frame_equal(a.results.reset_index(drop=True), b.results.reset_index(drop=True))
    assert (a.evidence.case_runs is None) == (b.evidence.case_runs is None)
    if a.evidence.case_runs is not None:
        assert b.evidence.case_runs is not None
        pd.testing.assert_frame_equal(a.evidence.case_runs, b.evidence.case_runs)


@pytest.mark.parametrize("chosen", [{}, {"runs": ["run-004"]}, {"since": "2026-01-03"}])
def test_a_fleets_inputs_are_those_from_every_results_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           chosen: dict) -> None:
    url = _db(tmp_path, MODELS, random.Random())
    whole = report_inputs.load_report_inputs(url, with_history=False, **chosen)
    read: list[object] = []
    real = report_inputs.history_columns

    def spy(*args: Any, **kwargs: Any) -> Any:
        read.append(kwargs.get("runs"))
        return real(*args, **kwargs)

    monkeypatch.setattr(report_inputs, "history_columns", spy)
    monkeypatch.setattr(reads, "FLEET_RESULTS", 0)
    fleet = report_inputs.load_report_inputs(url, with_history=False, **chosen)
    _same(fleet, whole)
    assert fleet.evidence.case_runs is not None and not fleet.results.empty
    # every result's keys only where the report shows each model's newest runs; else those of the runs shown
    assert read == [None] if not chosen else read == [sorted(set(fleet.results["run_id"]))]


def test_a_fleet_of_one_model_reads_no_results_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = _db(tmp_path, dict(list(MODELS.items())[:1]), random.Random())
    whole = report_inputs.load_report_inputs(url, with_history=False)
    monkeypatch.setattr(report_inputs, "history_columns", lambda *a, **k: pytest.fail("read every result's keys"))
    monkeypatch.setattr(reads, "FLEET_RESULTS", 0)
    fleet = report_inputs.load_report_inputs(url, with_history=False)
    _same(fleet, whole)
    assert fleet.evidence.case_runs is None and set(fleet.counts["run_id"]) == {f"run-{n:03d}" for n in range(1, 7)}
