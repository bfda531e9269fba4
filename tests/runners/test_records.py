"""From a worker's outcome to the measurement record (runners/orchestration/records.py): the case's
collective mode reaches every collective result whatever its status, and no other case's; the stored
case keeps its params as its key reads them, so a database written when the mode was a parameter
reads the same."""
from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.db.store import ResultStore
from rooflab.record import CaseRecord, TimingMethod, WorkModel
from rooflab.runners.cli.app import app
from rooflab.runners.engine.stats import summarize
from rooflab.runners.orchestration.messages import CaseOutcome
from rooflab.runners.orchestration.records import build_record
from rooflab.suite.case import Case
from rooflab.suite.spec import expand, load_spec
from rooflab.vocab import CollectiveMode, Pace, ResultStatus
from tests.db.factories import make_env, make_run


def _record(case: Case, outcome: CaseOutcome, run_id: str = "r"):
    return build_record(case, outcome, run_id=run_id, device_fingerprint="fp", device_uuid=None, shard=None,
                        work_model=lambda c: WorkModel(flops=0, bytes=int(c.params["n"]) * 4))


@pytest.mark.parametrize("mode", list(CollectiveMode))
@pytest.mark.parametrize("status", [ResultStatus.SKIPPED, ResultStatus.FAILED, ResultStatus.INCORRECT])
def test_a_collective_says_its_mode_whatever_its_status(mode: CollectiveMode, status: ResultStatus) -> None:
    n = random.randint(1, 1 << 20)
    case = Case("all_reduce", 1, "collective", "gloo", "float32", "hot", "launch", {"n": n, "ranks": 2},
                collective_mode=mode)
    # nothing timed (a skip), or a method that does not name the mode (a wrong first call)
    methods = [None, TimingMethod(cache="hot", timing_mode="launch", first_call_ms=random.random())]
    for method in methods:
        record = _record(case, CaseOutcome(case.case_key, status, "why", method=method))
        assert record.method.collective_mode == mode and record.method.pace is None
        assert record.identity.case.case_key == case.case_key
        assert dict(record.identity.case.params) == case.key_params  # `mode: isolated` where isolated
        assert ("mode" in record.identity.case.params) == (mode is CollectiveMode.ISOLATED)
        assert record.work.bytes == 4 * n


def test_a_timed_collective_keeps_its_pace_and_the_case_decides_the_mode() -> None:
    case = Case("all_gather", 1, "collective", "gloo", "float32", "hot", "launch", {"n": 64, "ranks": 2},
                collective_mode=CollectiveMode.ISOLATED)
    timed = TimingMethod(cache="hot", timing_mode="launch", pace=Pace.BARRIER)
    record = _record(case, CaseOutcome(case.case_key, ResultStatus.SKIPPED, None, method=timed))
    assert (record.method.collective_mode, record.method.pace) == (CollectiveMode.ISOLATED, Pace.BARRIER)


def test_a_kernel_has_no_collective_mode() -> None:
    case = Case("copy", 1, "pointwise", "eager", "float32", "cold", "launch", {"n": random.randint(1, 4096)})
    planted = TimingMethod(cache="cold", timing_mode="launch", collective_mode=CollectiveMode.STREAM)
    for method in (None, planted):
        record = _record(case, CaseOutcome(case.case_key, ResultStatus.SKIPPED, "why", method=method))
        assert record.method.collective_mode is None
        assert record.method.cache == "cold"


def test_a_database_written_when_the_mode_was_a_param_reads_the_same(tmp_path: Path) -> None:
    """An isolated collective as rooflab stored it when its mode was a parameter (the `cases` row's
    params holding `mode: isolated`, the measurement's `collective_mode`), and the same outcome stored
    now from the spec's case: the two databases export the same rows, and each file imports into
    the other as already present (the same case, run and device)."""
    rng = random.Random()
    n = rng.randint(1, 1 << 16)
    key = f"all_reduce.v1:gloo:float32:hot:launch:mode=isolated,n={n},ranks=2,reduce_op=sum"
    old_case = CaseRecord(case_key=key, op="all_reduce", op_version=1, family="collective", backend="gloo",
                          dtype="float32", params={"mode": "isolated", "n": n, "ranks": 2, "reduce_op": "sum"})
    spec = tmp_path / "comms.yaml"
    spec.write_text(f"name: comms\nbenchmarks:\n  - name: r\n    op: all_reduce\n    backends: [gloo]\n"
                    f"    cache: [hot]\n    params: {{n: {n}, ranks: 2, mode: isolated}}\n")
    [case] = expand(load_spec(spec), "cpu")
    run, env = make_run("night", rng=rng), replace(make_env(0), device_kind="cpu")
    samples = tuple(rng.uniform(0.01, 1.0) for _ in range(8))
    method = TimingMethod(cache="hot", timing_mode="launch", pace=Pace.BARRIER, flush_method="none")
    outcome = CaseOutcome(case.case_key, ResultStatus.OK, None, method=method, stats=summarize(samples),
                          samples_ms=samples)
    new = _record(case, outcome, run.run_id)
    old = replace(new, identity=replace(new.identity, case=old_case),
                  method=replace(new.method, collective_mode="isolated"))
    files = {}
    for name, record in (("old", old), ("new", new)):
        url = f"sqlite:///{tmp_path / name}.db"
        with ResultStore(url) as store:
            store.start_run(run)
            store.add_environment(run.run_id, env)
            store.add_measurement(replace(record, identity=replace(
                record.identity, device_fingerprint=env.device_fingerprint, device_uuid=str(env.info["uuid"]))))
            store.finish_run(run.run_id, "complete")
        files[name] = tmp_path / f"{name}.jsonl"
        exported = CliRunner().invoke(app, ["export", "--format", "jsonl", "--out", str(files[name]), "--db", url])
        assert exported.exit_code == 0, exported.output
    old_rows, new_rows = ([{k: v for k, v in json.loads(line).items() if k != "finished_at"}  # the store's clock
                           for line in files[name].read_text().splitlines()] for name in ("old", "new"))
    assert old_rows == new_rows and len(new_rows) == 1
    assert new_rows[0]["case_key"] == key and new_rows[0]["params"] == dict(old_case.params)
    assert (new_rows[0]["collective_mode"], new_rows[0]["pace"]) == ("isolated", "barrier")
    for source, target in (("old", "new"), ("new", "old")):
        result = CliRunner().invoke(app, ["import", str(files[source]), "--db", f"sqlite:///{tmp_path / target}.db",
                                          "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["measurements_added"] == 0
