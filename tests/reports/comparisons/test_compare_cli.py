"""`rooflab compare` on databases: intervals from raw samples, and after they are pruned. The
committed H100 and H200 exports, where the comparison page and the CLI must give one answer:
tests/reports/pages/test_report_snapshot.py, on the report it writes of them."""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from tests.reports.synth import device_rows, row, write_db

runner = CliRunner()
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
N = 1 << 24


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _timed(op: str, level_ms: float, seed: int, **kw) -> dict:
    """A case with 50 raw samples at 1 % noise around `level_ms`."""
    samples = level_ms * (1 + 0.01 * np.random.default_rng(seed).standard_normal(50))
    r = row(op=op, family="pointwise", params={"n": N}, flops=N, nbytes=12 * N, median_ms=float(np.median(samples)),
            **kw)
    r["samples_ms"] = [float(x) for x in samples]
    return r


@pytest.fixture(scope="module")
def sampled(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cmp') / 'results.db'}"
    h100: dict[str, Any] = dict(device_name=H100, fingerprint="fp-h100", run_id="h100-run", run_order=1)
    h200: dict[str, Any] = dict(device_name=H200, fingerprint="fp-h200", run_id="h200-run", run_order=2)
    rows = device_rows(**h100) + device_rows(hbm_gbps=4300.0, **h200)
    rows += [_timed("add", 1.0, 1, **h100), _timed("add", 1.0 / 1.05, 2, **h200),  # a planted 5 % speedup
             _timed("triad", 1.0, 3, **h100), _timed("triad", 1.0, 4, **h200)]  # and 0 %

    write_db(url, rows)
    return url


def _cases(url: str) -> dict:
    res = _run("compare", "--baseline", "H100", "--candidate", "H200", "--db", url, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    return {c["case_key"].split(".")[0]: c for c in data["cases"]} | {"_data": data}


def test_intervals_from_raw_samples_then_from_stored_cis_once_pruned(sampled, tmp_path):
    cases = _cases(sampled)
    add, triad = cases["add"], cases["triad"]
    assert (add["interval"] == "bootstrap" and add["standing"] == "faster"
            and 1.03 < add["speedup_low"] < 1.05 < add["speedup_high"])
    assert triad["interval"] == "bootstrap" and triad["standing"] == "not_significant"
    assert triad["speedup_low"] < 1.0 < triad["speedup_high"]
    assert cases["_data"]["pairing"]["baseline"]["runs"] == ["h100-run"]
    text = _run("compare", "--baseline", "H100", "--candidate", "H200", "--db", sampled).stdout
    assert "paired runs: baseline NVIDIA H100 80GB HBM3: h100-run" in text and "Why:" in text
    assert re.search(r"intervals from: \d+ from the raw samples of both sides \(bootstrap\)$", " ".join(text.split())
                     .split(" cases that deviate")[0].split("n.s.:")[1]), text
    from rooflab.db.prune import prune_samples

    prune_samples(sampled, timedelta(days=1), now=datetime.now(UTC) + timedelta(days=3650))
    add = _cases(sampled)["add"]
    assert add["interval"] == "stored_ci" and "without raw samples" in add["note"]
    text = " ".join(_run("compare", "--baseline", "H100", "--candidate", "H200", "--db", sampled).stdout.split())
    assert re.search(r"intervals from: \d+ from the stored CIs of the medians \(a side without raw samples", text)


def test_two_runs_of_one_device(tmp_path):
    """Named by their runs: every case of the older run is compared, though a newer run measured it
    again; nothing changed between them, so no interval excludes 1."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    first = dict(device_name=H100, fingerprint="fp-h100", run_id="h100-run", run_order=1)
    again = dict(first, run_id="h100-run-2", run_order=2)
    write_db(url, [_timed("add", 1.0, 1, **first), _timed("triad", 1.0, 3, **first),
                   _timed("add", 1.0, 5, **again), _timed("triad", 1.0, 6, **again)])
    res = _run("compare", "--baseline", "h100-run", "--candidate", "h100-run-2", "--db", url, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["pairing"]["reason"] == "the runs named"
    cases = {c["case_key"].split(".")[0]: c for c in data["cases"]}
    assert set(cases) == {"add", "triad"}
    assert all(c["standing"] == "not_significant" for c in cases.values()), cases
