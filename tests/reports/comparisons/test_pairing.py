"""reports.comparisons.pairing: which results a comparison pairs, and why."""
from __future__ import annotations

import pandas as pd
import pytest

from rooflab.reports.comparisons.pairing import comparison_runs, pair_runs
from rooflab.reports.data.run_counts import case_runs_of, counts_of
from rooflab.reports.errors import ReportInputError
from tests.reports.synth import launch, row, stream

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
N = 1 << 20


def _case(op: str, **kw) -> dict:
    return row(op=op, family="pointwise", params={"n": N}, flops=N, nbytes=8 * N, median_ms=0.1, **kw)


def _run(run_id: str, order: int, suite: str, ops: list[str], **kw) -> list[dict]:
    rows = [_case(op, run_id=run_id, run_order=order, **kw) for op in ops]
    for r in rows:
        r["suite"] = suite
    return rows


def _frame() -> pd.DataFrame:
    h100 = dict(device_name=H100, fingerprint="fp-h100")
    h200 = dict(device_name=H200, fingerprint="fp-h200")
    rows = (_run("h100-quick-1", 1, "quick", ["copy", "scale", "add"], **h100)
            + _run("h100-roof-2", 2, "roofline", ["copy", "triad"], **h100)
            + _run("h100-quick-3", 3, "quick", ["copy"], **h100)  # a partial rerun of the quick spec
            + _run("h200-quick-4", 4, "quick", ["copy", "scale", "add", "triad"], **h200))
    return pd.DataFrame(rows)


def _pair(df: pd.DataFrame, baseline: str, candidate: str, **kw):
    return pair_runs(counts_of(df), case_runs_of(df), baseline, candidate, **kw)


def test_two_devices_pair_each_case_newest_result_in_the_suites_both_ran():
    p = _pair(_frame(), "H100", "H200")
    base = dict(zip(p.baseline.cases["case_key"].str.split(".").str[0], p.baseline.cases["run_id"], strict=True))
    # the roofline run is not paired (the H200 ran no roofline spec); the partial rerun does not hide the rest
    assert base == {"copy": "h100-quick-3", "scale": "h100-quick-1", "add": "h100-quick-1"}
    assert p.baseline.runs == ("h100-quick-3", "h100-quick-1") and p.candidate.runs == ("h200-quick-4",)
    assert "(quick)" in p.reason and "same spec" in p.reason
    text = p.describe()
    assert "h100-quick-3 (quick, 1 cases)" in text and "h100-quick-1 (quick, 2 cases)" in text
    assert p.as_dict()["baseline"]["cases_per_run"] == {"h100-quick-3": 1, "h100-quick-1": 2}


def test_without_a_suite_in_common_each_case_newest_result():
    df = _frame()
    df.loc[df["device_name"] == H200, "suite"] = "nightly"
    p = _pair(df, "H100", "H200")
    base = dict(zip(p.baseline.cases["case_key"].str.split(".").str[0], p.baseline.cases["run_id"], strict=True))
    assert base == {"copy": "h100-quick-3", "triad": "h100-roof-2", "scale": "h100-quick-1", "add": "h100-quick-1"}
    assert "no suite in common" in p.reason


def test_a_run_against_a_device_and_two_runs():
    df = _frame()
    p = _pair(df, "h100-roof-2", "H200")
    assert p.baseline.label == "run h100-roof-2" and set(p.baseline.cases["run_id"]) == {"h100-roof-2"}
    assert "no suite in common" in p.reason  # the H200 never ran the roofline spec
    p = _pair(df, "h100-quick-1", "H200")
    assert p.candidate.runs == ("h200-quick-4",) and "the run named is h100-quick-1" in p.reason
    p = _pair(df, "h100-quick-1", "h100-quick-3")
    assert p.reason == "the runs named" and p.baseline.device_name == p.candidate.device_name == H100
    # a run named keeps all its cases, also those a newer run of its device measured again
    assert len(p.baseline.cases) == 3 and set(p.baseline.cases["run_id"]) == {"h100-quick-1"}
    assert len(p.candidate.cases) == 1


def test_allowed_runs_and_bad_sides():
    df = _frame()
    p = _pair(df, "H100", "H200", allowed={"h100-quick-1", "h200-quick-4"})
    assert p.baseline.runs == ("h100-quick-1",)
    with pytest.raises(ReportInputError, match="name two of its runs"):
        _pair(df, "H100", "fp-h100")
    with pytest.raises(ReportInputError, match="--candidate: unknown device 'B200'.*h200-quick-4"):
        _pair(df, "H100", "B200")


def test_roofs_come_from_the_newest_run_with_probes_when_the_compared_runs_have_none():
    df = _frame()
    probes = [stream("stream_triad", 1 << 26, 3000.0, device_name=H100, fingerprint="fp-h100", run_id="h100-probes-0",
                     run_order=0), launch(0.009, device_name=H100, fingerprint="fp-h100", run_id="h100-probes-0",
                                          run_order=0)]
    for r in probes:
        r["suite"] = "roofline"
    df = pd.concat([df[df["run_id"] != "h100-roof-2"], pd.DataFrame(probes)], ignore_index=True)
    p = _pair(df, "H100", "H200")
    assert p.baseline.roof_runs == ("h100-probes-0",) and "h100-probes-0" in p.runs()
    every, compared = comparison_runs(counts_of(df), case_runs_of(df))
    assert "h100-probes-0" in every and "h100-probes-0" not in compared
