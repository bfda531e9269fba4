"""`rooflab nightly` as CI runs it, on a real (CPU) run over a planted history.

The measured op is `planted_scale` with a sleep of known length in each call (a plugin from
tests/runners/planted_ops.py), so tonight's time is known from below: a sleep never ends early.
The synthetic history, written through db.store on this machine's own CPU environment, sets the
baseline under it: a 20 % step (baseline 2.0/1.2 ms, last night 2.0 ms) is a regression once
tonight measures >= 2.0 ms again; a flat history at tonight's level is clean (the same night, merged
into a database holding such a history, judged by `rooflab nightly --skip-run`). The worker is shown a
quiet machine (tests/runners/quiet_machine.py): on a loaded test machine tonight's result would
rightly be `contended`, and a contended result is only ever a suspect. Up to 200 ms of samples a
case: a sleep woken late by a busy scheduler (the other test worker on the second core) is a few
samples in a hundred, which leaves the median's interval narrow; with 40 ms (about 15 samples) the
planted step was called a suspect on a machine at load 9 (a noisy night is only a suspect too).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rooflab.record import CaseRecord, record_from_columns
from rooflab.suite.case import make_case_key
from tests.runners.cluster_support import run_record, sqlite_url
from tests.runners.run_process import PLUGIN

REPO = Path(__file__).resolve().parents[3]
PLUGINS = "tests.runners.planted_ops,tests.runners.quiet_machine"
SPEC = """name: planted
defaults:
  cache: [hot]
  timing: {warmup_ms: 0, warmup_calls: 1, min_samples: 5, min_time_ms: 0, max_time_ms: 200}
benchmarks:
  - name: sleepy
    op: planted_scale
    params: {n: 4096, sleep_ms: [1.0, 2.0]}
"""
SLEEPS_MS = (1.0, 2.0)


def case(sleep_ms: float) -> CaseRecord:
    params = {"n": 4096, "sleep_ms": sleep_ms}
    key = make_case_key("planted_scale", 1, "eager", "float32", "hot", "launch", params)
    return CaseRecord(case_key=key, op="planted_scale", op_version=1, family="pointwise", backend="eager",
                      dtype="float32", params=params)


@pytest.fixture(scope="module")
def cpu_environment():
    from rooflab.runners.machine.environment import capture

    env, _ = capture("cpu")
    return env


def plant(url: str, env, medians_by_night: list[dict[float, float]]) -> None:
    """One run per night, ending yesterday, of both cases at the given medians (ms), on this machine
    (its host: a CPU without a UUID is its host and model, so its past nights are this host's)."""
    from rooflab.db.store import ResultStore

    rng = np.random.default_rng(31)
    now = datetime.now(UTC)
    with ResultStore(url) as store:
        for i, medians in enumerate(medians_by_night):
            started = now - timedelta(days=len(medians_by_night) - i)
            run_id = f"past-{i:02d}"
            store.start_run(run_record(run_id, started, suite="planted", host=socket.gethostname()))
            store.add_environment(run_id, env)
            for sleep_ms, median_ms in medians.items():
                samples = np.sort(median_ms * (1 + 0.002 * rng.standard_normal(15)))
                store.add_measurement(record_from_columns(
                    run_id=run_id, case=case(sleep_ms), device_fingerprint=env.device_fingerprint, cache="hot",
                    timing_mode="launch", status="ok", measured_at=started, clock="perf_counter",
                    median_ms=float(np.median(samples)), mean_ms=float(samples.mean()), min_ms=float(samples[0]),
                    max_ms=float(samples[-1]), p10_ms=float(samples[1]), p90_ms=float(samples[-2]),
                    iqr_ms=float(np.subtract(*np.quantile(samples, [0.75, 0.25]))), std_ms=float(samples.std()),
                    n_samples=len(samples), rel_ci_halfwidth=0.002, stop_reason="converged", flops=4096,
                    bytes=8 * 4096, samples_ms=tuple(float(x) for x in samples),
                ))
            store.finish_run(run_id, "complete")


def nightly_process(spec: Path, url: str, out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), ROOFLAB_PLUGINS=PLUGINS)
    env.pop("ROOFLAB_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "rooflab", "nightly", str(spec), "--db", url, "--out", str(out), "--device", "cpu"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "planted.yaml"
    path.write_text(SPEC)
    return path


def test_nightly_fails_on_a_planted_20_percent_step_and_passes_the_same_night_on_a_clean_history(
        tmp_path: Path, spec: Path, cpu_environment: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One real night (a `rooflab nightly` process) judged twice: over the planted step it fails; over
    a flat history at tonight's level (the same night merged into another database) it passes."""
    from typer.testing import CliRunner

    from rooflab.db.merge import merge
    from rooflab.runners.cli.app import app

    url = sqlite_url(tmp_path)
    baseline = {1.0: 1.0, 2.0: 2.0 / 1.2}
    step = {1.0: 1.0, 2.0: 2.0}  # last night: the 2 ms case is 20 % slower than its baseline
    plant(url, cpu_environment, [baseline] * 8 + [step])
    out = tmp_path / "report"
    done = nightly_process(spec, url, out)
    assert done.returncode == 1, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [r["case_key"] for r in summary["regressions"]] == [case(2.0).case_key]
    assert summary["regressions"][0]["rel_change"] > 0.15  # >= 2 ms against a 1.667 ms baseline
    assert summary["counts"]["ok"] == 2 and summary["run_status"] == "complete"
    assert summary["cases_expected"] == 2 and summary["cases_missing"] == [] and summary["notes"] == []
    assert summary["invocation"]["counts"]["ok"] == 2
    assert (out / "index.html").is_file()
    assert "REGRESSION" in done.stdout and case(2.0).case_key in done.stdout
    assert "exit code 1" in done.stdout

    # the same night over a clean history: nine flat nights under the planted nights' run ids, so that
    # `rooflab db merge` keeps them (a target keeps what it has) and adds tonight's run only
    clean = f"sqlite:///{tmp_path / 'clean.db'}"
    plant(clean, cpu_environment, [{1.0: 1.0, 2.0: 2.0}] * 9)
    merge(clean, [url])
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)  # the spec's op, for its expansion here
    night = summary["run_id"]
    judged = CliRunner().invoke(app, ["nightly", str(spec), "--skip-run", "--run-id", night,
                                      "--db", clean, "--out", str(tmp_path / "clean")])
    assert judged.exit_code == 0, judged.output
    summary = json.loads((tmp_path / "clean" / "summary.json").read_text())
    assert summary["run_id"] == night
    assert summary["regressions"] == [] and summary["series_checked"] == 2 and summary["insufficient_data"] == 0
    assert "0 regressions" in judged.output and "exit code 0" in judged.output
