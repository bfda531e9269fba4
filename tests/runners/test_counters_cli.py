"""`rooflab counters` end to end with a fake `ncu`, and each refusal.

What this covers without a GPU: the command line rooflab gives ncu (checked by the fake: flags, NVTX
filter, metrics, the child command), the child process preparing each case exactly as a worker does
(it really runs, on the CPU, under the fake ncu: here forked from a warm Python, in
test_counters_refusal.py started fresh as ncu starts it), the parsing of a replayed CSV, the
comparison with the model, the retry without a metric ncu refuses, a failing pass stored as failed
while the others go on, an incorrect case held back until a pass is profiled and then stored in its
place, the storage beside the measurement checked, and the refusals (ncu's permission refusal:
test_counters_refusal.py).

The seam: `describe_device` is planted so that the device check sees a CUDA device whose torch
device is in fact the CPU (kind "cuda", torch_device "cpu"); everything after that check is the
real code. What only a GPU can show: that real ncu accepts this command line and these metric
names, that the NVTX range selects the call's kernels, and the counts themselves
(the GPU loan's counters step, docs/gpu-validation.md; tests/runners/test_counters_gpu.py).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rooflab
from rooflab.db.counters import counters_frame
from rooflab.db.store import ResultStore
from rooflab.record import CaseRecord, with_columns
from rooflab.runners.cli.app import app
from rooflab.runners.counters import metrics as m
from rooflab.runners.counters import session
from rooflab.runners.counters.ncu import CountersRefusal
from rooflab.runners.machine.environment import capture
from rooflab.runners.orchestration.records import case_record
from rooflab.suite.spec import expand, load_spec
from tests.db.factories import make_measurement, make_run
from tests.runners import fake_ncu as fake_ncu_script
from tests.runners.warm_python import WarmPython

HERE = Path(__file__).resolve().parent
# what the counters child imports before its case (runners/counters/child.py)
CHILD_PRELOAD = ("torch", "rooflab.runners.machine.environment", "rooflab.runners.orchestration.prepare",
                 "rooflab.runners.orchestration.worker", "rooflab.suite.ops.registry")
runner = CliRunner()
N = 1 << 20
SPEC = f"""name: counters-test
defaults: {{timing: {{max_time_ms: 50}}}}
benchmarks:
  - {{name: wrong, op: planted_wrong, params: {{n: 4096}}}}
  - {{name: copy, op: copy, params: {{n: {N}}}}}
  - {{name: cos_cos, op: cos_cos, dtypes: [bfloat16], params: {{n: {N}}}}}
  - {{name: copy_hot, op: copy, cache: [hot], params: {{n: {N}}}}}
  - {{name: gelu, op: gelu, params: {{n: {N}}}}}
  - {{name: split, op: planted_split, params: {{n: {N}}}}}
  - {{name: add, op: add, params: {{n: {N}}}}}
"""
SCRIPT = [
    {"csv": "copy_float32.csv"},  # planted_wrong: the child finds the output incorrect
    {"csv": "copy_float32.csv"},
    {"csv": "cos_cos_eager_bfloat16.csv"},
    {"csv": "copy_float32_hot.csv"},
    {"reject": [m.XU_INSTRUCTIONS], "csv": "gelu_float32_na.csv"},  # the first gelu pass: refused metric
    {"csv": "gelu_float32_na.csv"},
    {"csv": "copy_float32.csv"},  # planted_split: right in total, wrong on each side
    {"error": "planted profiler failure", "run_target": False},
]
SWEPT_L2 = 1 << 20  # the planted device's L2: the write-back pass sweeps 4 MiB of the CPU's memory


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch) -> Path:
    """A fake `ncu` first on PATH (tests/runners/fake_ncu.py), its log and state in tmp_path."""
    return fake_ncu_script.install(tmp_path, monkeypatch)


@pytest.fixture
def warm_python(fake_ncu: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The fake ncu starts its children by a fork of a Python that imported torch once
    (tests/runners/warm_python.py): the same child code in a process of its own, without a fresh
    interpreter's import of torch for each of the five passes. test_counters_refusal.py's children
    start as real ncu starts them, in a fresh interpreter."""
    with WarmPython(CHILD_PRELOAD) as warm:
        warm.wait_ready()
        monkeypatch.setenv("FAKE_NCU_WARM_PYTHON", warm.address)
        yield warm.address


calls = fake_ncu_script.calls


def planted_cuda(*, mig: bool = False):
    """A device description that says CUDA while its torch device is the CPU (the module doc)."""
    def describe(device):
        environment, info = capture("cpu")
        if mig:
            environment = replace(environment, info={**environment.info, "mig_enabled": True,
                                                     "uuid": "MIG-5e0f3c7a-planted"})
        return environment, replace(info, kind="cuda", name="planted CUDA device (the CPU underneath)",
                                    l2_bytes=SWEPT_L2)
    return describe


@pytest.mark.usefixtures("warm_python")
def test_counters_end_to_end_with_a_fake_ncu(tmp_path: Path, fake_ncu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    # a measurement of the cold copy on this device, for the reading to be linked to
    environment, _info = capture("cpu")
    copy = next(c for c in expand(load_spec(str(spec)), "cuda") if c.op == "copy" and c.cache == "cold")
    record = CaseRecord(copy.case_key, copy.op, copy.op_version, copy.family, copy.backend, copy.dtype, copy.params)
    measured_run = make_run("measured-copy")
    with ResultStore(url) as store:
        store.start_run(measured_run)
        store.add_environment(measured_run.run_id, environment)
        with_uuid = replace(environment, info={**environment.info, "uuid": "unused"})
        store.add_measurement(with_columns(make_measurement(measured_run, record, with_uuid), device_uuid=None))
        store.finish_run(measured_run.run_id, "complete")
    monkeypatch.setenv("FAKE_NCU_SCRIPT", json.dumps(SCRIPT))
    monkeypatch.setattr(session, "describe_device", planted_cuda())

    keep = tmp_path / "kept"
    result = runner.invoke(app, ["counters", str(spec), "--db", url, "--json", "--keep-reports", str(keep)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ncu_version"] == "2025.1.1.0" and out["metrics"] == list(m.METRICS)
    got = {(r["op"], r["cache"]): r for r in out["readings"]}
    statuses = [r["status"] for r in out["readings"]]  # the incorrect case, held back, is written in its place
    assert statuses == ["incorrect", "ok", "ok", "ok", "ok", "ok", "failed"], [
        r["error"] for r in out["readings"]]

    cold = got[("copy", "cold")]  # the write-back pass: the call, then two sweeps (the second: its own writes)
    assert cold["kernels"] == 1 and cold["kernel_ms"] == pytest.approx(5_344 / 1e6)
    assert (cold["dram_read_bytes"], cold["dram_write_bytes"]) == (4_196_352, 2_097_152 + 2_097_664 - 512)
    assert (cold["caught_write_back_bytes"], cold["sweep_own_write_bytes"]) == (2_097_664 - 512, 512)
    assert (cold["model_bytes_read"], cold["model_bytes_written"]) == (N * 4, N * 4)
    assert not cold["bytes_differ"] and cold["reason"] is None and cold["reads"]["judged"] and cold["writes"]["judged"]
    assert cold["checked_run_id"] == "measured-copy"
    # the profiling pass's own DRAM counts (each kernel flushed before it, no write-back) stay in metric_values
    assert cold["metric_values"][m.DRAM_WRITE] == 4_194_304

    cos = got[("cos_cos", "cold")]  # two kernels: the eager chain writes an intermediate, read back from the L2
    assert cos["kernels"] == 2 and cos["dram_read_bytes"] == 2_099_200 + 1_024
    assert cos["dram_write_bytes"] == 2 * 1_048_576 + 2_097_152
    assert not cos["reads"]["differ"] and cos["writes"]["differ"] and cos["writes"]["reason"] == "extra_traffic"
    assert cos["bytes_differ"] and cos["reason"] == "extra_traffic"
    assert cos["excess_bytes"] == cos["dram_bytes"] - 2 * N * 2
    assert cos["fp32_flops"] == 2 * 25 * N and cos["flops_ratio"] == pytest.approx(2 * N / (50 * N))

    hot = got[("copy", "hot")]  # its inputs came from the L2; its writes, caught by the sweep, are all there
    assert hot["reads"]["differ"] and hot["reads"]["reason"] == "served_from_l2" and not hot["writes"]["differ"]
    assert hot["bytes_differ"] and hot["reason"] == "served_from_l2" and hot["checked_run_id"] is None

    gelu = got[("gelu", "cold")]  # ncu refused a metric: the pass was made again without it
    assert set(gelu["missing_metrics"]) == {m.XU_INSTRUCTIONS, m.L2_TRAFFIC}
    assert gelu["l2_traffic_bytes"] is None and gelu["dram_bytes"] == 4_196_352 + 4_194_304

    split = got[("planted_split", "cold")]  # right in total (ratio 1.000), wrong on each side: both flagged
    assert split["bytes_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert split["reads"]["differ"] and split["reads"]["reason"] == "served_from_l2"
    assert split["writes"]["differ"] and split["writes"]["reason"] == "extra_traffic" and split["bytes_differ"]

    assert "planted profiler failure" in got[("add", "cold")]["error"]
    assert "max abs error" in got[("planted_wrong", "cold")]["error"]  # the child ran the case's check

    made = calls(tmp_path)
    assert [c["problems"] for c in made] == [[]] * len(made) and len(made) == 13
    caches = [c["argv"][c["argv"].index("--cache-control") + 1] for c in made]
    assert caches == ["all", "all", "none", "all", "none", "none", "none", "all", "all", "none", "all", "none", "all"]
    asked = [c["argv"][c["argv"].index("--metrics") + 1].split(",") for c in made]
    assert m.XU_INSTRUCTIONS in asked[7] and m.XU_INSTRUCTIONS not in asked[8]
    assert asked[2] == [m.DRAM_READ, m.DRAM_WRITE]  # the write-back pass counts DRAM only

    kept = keep / "cos_cos.v1_eager_bfloat16_cold_launch_n=1048576.csv"  # ncu's report, as the first GPU run keeps it
    assert kept.read_text() == (HERE / "fixtures" / "ncu" / "cos_cos_eager_bfloat16.csv").read_text().join(
        ["==PROF== Disconnected from process\n", ""])
    assert len(list(keep.glob("*.writeback.csv"))) == len(list(keep.glob("*.writeback.log"))) == 5
    assert len(list(keep.glob("*.csv"))) == len(list(keep.glob("*.log"))) == 7 + 5  # a report and a log per pass

    frame = counters_frame(url)
    assert len(frame) == 7 and list(frame["status"]) == [r["status"] for r in out["readings"]]
    stored = frame.set_index(["op", "cache"])
    assert stored.loc[("cos_cos", "cold"), "reason"] == "extra_traffic"
    assert stored.loc[("copy", "cold"), "checked_run_id"] == "measured-copy"
    assert stored.loc[("gelu", "cold"), "l2_traffic_bytes"] is None
    assert stored.loc[("planted_split", "cold"), "write_reason"] == "extra_traffic"
    assert stored.loc[("copy", "cold"), "caught_write_back_bytes"] == 2_097_664 - 512
    runs = rooflab.runs(url).set_index("run_id")
    assert runs.loc[out["run_id"], "status"] == "complete"


def _refused(args: list[str], tmp_path: Path, message: str) -> str:
    """`rooflab counters ARGS` refused with `message`, exit 2 and no database written; its output."""
    db = tmp_path / "refused.db"
    result = runner.invoke(app, ["counters", *args, "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not db.exists(), "a refusal wrote to the database"
    return result.output


def test_a_cpu_device_is_refused(tmp_path) -> None:
    _refused(["quick", "--device", "cpu"], tmp_path, "--device cpu is a CPU: counters are read on a CUDA GPU")


def test_no_ncu_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(session, "describe_device", planted_cuda())
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing named ncu there
    _refused(["quick", "-f", "op=copy"], tmp_path, "`ncu` is not on PATH")
    _refused(["quick", "-f", "op=copy", "--ncu", str(tmp_path / "no-such-ncu")], tmp_path, "not an executable file")


def test_a_mig_slice_is_refused(tmp_path, monkeypatch, fake_ncu) -> None:
    monkeypatch.setattr(session, "describe_device", planted_cuda(mig=True))
    _refused(["quick", "-f", "op=copy"], tmp_path, "is a MIG slice")
    assert calls(tmp_path) == []


def test_the_python_api_refuses_as_the_command_does(tmp_path) -> None:
    with pytest.raises(CountersRefusal, match="--device cpu is a CPU"):
        rooflab.counters("quick", db=f"sqlite:///{tmp_path / 'x.db'}", device="cpu")
    assert not (tmp_path / "x.db").exists()


def test_a_report_that_ncu_printed_with_its_output_is_read_there(tmp_path) -> None:
    from datetime import UTC, datetime

    from rooflab.db.counters import CounterRecord
    from rooflab.runners.counters.ncu import PassOutput

    case = expand(load_spec("quick"), "cuda")[0]
    base = CounterRecord(run_id="r", case=case_record(case), device_fingerprint="fp", device_uuid=None, cache="cold",
                         timing_mode="launch", status="failed", measured_at=datetime.now(UTC), model_flops=0,
                         model_bytes=2 * N * 4, metrics=m.METRICS)
    result = tmp_path / "result.json"
    result.write_text('{"status": "ok", "error": null, "first_call_ms": 1.0}')
    printed = "==PROF== Connected\n" + (HERE / "fixtures" / "ncu" / "copy_float32.csv").read_text()
    got = session._interpret(base, PassOutput(0, "", printed), result, list(m.METRICS), [], 60.0)
    assert got.status == "ok" and got.kernels == 1 and got.dram_write_bytes == 4_194_304
    none = session._interpret(base, PassOutput(0, "", "==PROF== Connected\n"), result, list(m.METRICS), [], 60.0)
    assert none.status == "failed" and none.error is not None and "no header row" in none.error
    late = session._interpret(base, PassOutput(None, "", ""), result, list(m.METRICS), [], 60.0)
    assert late.status == "failed" and late.error is not None and "ran past 60 s" in late.error
