"""The metrics asked of ncu: the code's one list (runners/counters/metrics.py) against the fake
ncu's own literal list (tests/runners/fake_ncu.py), and the fake refusing a command line that lacks
any one of them, so that a metric the code stops asking for fails the end-to-end test."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.runners.counters import metrics as m
from rooflab.runners.counters import session, writeback
from rooflab.runners.counters.child import ChildRequest, write_request
from rooflab.runners.counters.ncu import command
from tests.runners import fake_ncu
from tests.runners.test_counters_cli import planted_cuda

runner = CliRunner()


def test_the_code_asks_for_exactly_the_metrics_the_fake_ncu_expects() -> None:
    assert list(m.METRICS) == list(fake_ncu.METRICS)
    assert len(m.METRICS) == 16 and len(set(m.METRICS)) == 16


def _problems(metrics: list[str], tmp_path: Path, rejected: tuple[str, ...] = ()) -> list[str]:
    request = tmp_path / "request.pkl"
    request.write_bytes(b"")
    argv = command("ncu", metrics=metrics, cache="cold", log_file=tmp_path / "ncu.csv", request=request)
    options, flags, target, problems = fake_ncu.parse(argv[1:])
    return problems + fake_ncu.check(options, flags, target, rejected)


@pytest.mark.parametrize("dropped", fake_ncu.METRICS)
def test_the_fake_refuses_a_command_line_without_any_one_metric(dropped: str, tmp_path) -> None:
    assert _problems(list(m.METRICS), tmp_path) == []
    without = [x for x in m.METRICS if x != dropped]
    assert _problems(without, tmp_path) == [f"metric {dropped} not asked for"]
    assert _problems(without, tmp_path, rejected=(dropped,)) == []  # the pass made again without a refused one
    assert _problems([*m.METRICS, "made__up.sum"], tmp_path) == ["metric 'made__up.sum' is not one rooflab asks for"]


def test_the_write_back_pass_asks_for_the_dram_metrics_only_and_leaves_the_caches_alone(tmp_path) -> None:
    assert list(writeback.METRICS) == list(fake_ncu.WRITEBACK_METRICS)
    request = write_request(ChildRequest(None, "cuda:0", "result.json", sweep_bytes=1 << 22), tmp_path / "r.pkl")

    def problems(**kw) -> list[str]:
        argv = command("ncu", **{"metrics": writeback.METRICS, "cache": "cold", "log_file": tmp_path / "x.csv",
                                 "request": request, "writeback": True, **kw})
        options, flags, target, found = fake_ncu.parse(argv[1:])
        return found + fake_ncu.check(options, flags, target)

    assert problems() == [] and problems(cache="hot") == []
    assert problems(writeback=False) == ["the write-back pass must leave the caches alone (--cache-control none)"]
    no_sweep = write_request(ChildRequest(None, "cuda:0", "result.json"), tmp_path / "plain.pkl")
    assert problems(request=no_sweep) == ["the write-back pass's child has no sweep size: None"]


def test_a_metric_dropped_from_the_code_fails_the_pass_end_to_end(tmp_path, monkeypatch) -> None:
    fake_ncu.install(tmp_path, monkeypatch)
    monkeypatch.setattr(session, "describe_device", planted_cuda())
    monkeypatch.setattr(m, "METRICS", tuple(x for x in m.METRICS if x != m.XU_INSTRUCTIONS))  # the planted fault
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: one\nbenchmarks:\n  - {name: copy, op: copy, params: {n: 4096}}\n")
    result = runner.invoke(app, ["counters", str(spec), "--db", f"sqlite:///{tmp_path / 'r.db'}", "--json"])
    assert result.exit_code == 0, result.output
    (reading,) = json.loads(result.stdout)["readings"]
    assert reading["status"] == "failed" and f"metric {m.XU_INSTRUCTIONS} not asked for" in reading["error"]
    assert fake_ncu.calls(tmp_path)[0]["problems"] == [f"metric {m.XU_INSTRUCTIONS} not asked for"]
