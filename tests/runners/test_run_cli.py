"""`rooflab run` end to end on the CPU: real ops, interrupts, kills, resume, shards, bad input."""
from __future__ import annotations

import json
import signal
import statistics
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from rooflab.db.query import results, runs
from rooflab.runners.cli.app import app
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.session import run_suite
from tests.runners.gate import GATE_ENV, wait_for_file
from tests.runners.run_process import PLUGIN, Rooflab

PLANTED_SPEC = """\
name: planted
defaults:
  cache: [hot]
  timing: {warmup_ms: 1, warmup_calls: 2, min_samples: 5, min_time_ms: 2, max_time_ms: 50}
benchmarks:
  - name: scale
    op: planted_scale
    params:
      n: [256, 512, 1024, 2048]
"""

# Three cases of planted_gate (tests/runners/planted_ops.py): the case of n elements waits inside
# its calls until the test opens its gate, so the test knows which case is in flight when it signals.
GATED_SPEC = """\
name: gated
defaults:
  cache: [hot]
  timing: {warmup_ms: 1, warmup_calls: 2, min_samples: 5, max_samples: 5, min_time_ms: 1, max_time_ms: 10}
benchmarks:
  - name: gated
    op: planted_gate
    params:
      n: [256, 512, 1024]
"""

REAL_SPEC = """\
name: e2e
defaults:
  cache: [hot]
  timing: {warmup_ms: 5, min_samples: 15, min_time_ms: 30, max_time_ms: 150, target_precision: 0.02}
benchmarks:
  - name: stream
    op: [copy, triad]
    params: {n: 1048576}
  - name: gemm
    op: matmul
    params: {m=n=k: 192}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def run_status(url: str, run_id: str) -> str:
    frame = runs(url)
    return str(frame.loc[frame["run_id"] == run_id, "status"].iloc[0])


# ---------------------------------------------------------------- interrupts, kills, resume


def test_ctrl_c_finishes_the_case_in_flight_then_resume_completes(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv(GATE_ENV, str(gate))
    spec = write(tmp_path, "gated.yaml", GATED_SPEC)
    db = tmp_path / "r.db"
    url = f"sqlite:///{db}"
    child = Rooflab(str(spec), "--db", url, "--run-id", "night")
    wait_for_file(gate / "waiting-256", child.proc)  # the first case is in flight
    child.proc.send_signal(signal.SIGINT)
    child.wait_for("finishing the case in flight")
    (gate / "open").touch()  # every case may go on from now
    code, out = child.finish()
    assert code == 130, out
    assert "finishing the case in flight" in out
    assert "Traceback" not in out
    first = results(url, run_id="night")
    assert len(first) == 1 and first["status"].tolist() == ["ok"]  # the in-flight case was stored
    assert "n=256," in first["case_key"].iloc[0]  # the first case of the spec
    assert run_status(url, "night") == "interrupted"

    # SPEC omitted: the spec stored with the run is used
    summary = run_suite(None, db=url, options=RunOptions(resume="night", device="cpu", quiet=True),
                        handle_signals=False)
    assert summary.exit_code == 0
    assert summary.already_measured == 1 and summary.counts["ok"] == 2
    after = results(url, run_id="night")
    assert len(after) == 3 and after["case_key"].is_unique
    assert set(after["status"]) == {"ok"}
    assert run_status(url, "night") == "complete"


def test_sigkill_midway_leaves_what_was_stored_and_resume_finishes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv(GATE_ENV, str(gate))
    (gate / "open-256").touch()  # the first case runs through; the second waits at its gate
    spec = write(tmp_path, "gated.yaml", GATED_SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    # --device cpu: the supervisor imports no torch (the Ctrl-C test's run resolves the default, auto)
    child = Rooflab(str(spec), "--db", url, "--run-id", "killed", "--device", "cpu")
    child.wait_for("[1/3] ok")
    wait_for_file(gate / "waiting-512", child.proc)  # the second case is in flight
    below = descendants(child.proc.pid)
    assert below  # the fork server and the worker
    child.proc.kill()
    child.finish()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in below), "worker processes outlived their killed supervisor"
    stored = results(url, run_id="killed")
    assert len(stored) == 1 and "n=256," in stored["case_key"].iloc[0]  # the case in flight is lost, no more
    assert run_status(url, "killed") == "running"
    (gate / "open").touch()

    resumed = run_suite(spec, db=url, options=RunOptions(resume="killed", device="cpu", quiet=True),
                        handle_signals=False)
    assert resumed.exit_code == 0 and resumed.already_measured == len(stored)
    after = results(url, run_id="killed")
    assert len(after) == 3 and after["case_key"].is_unique
    assert run_status(url, "killed") == "complete"
    assert set(stored["case_key"]) <= set(after["case_key"])


def test_shards_cover_the_spec_once_and_a_restarted_shard_measures_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)
    spec = write(tmp_path, "planted.yaml", PLANTED_SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"

    def kw(**options):
        return dict(db=url, options=RunOptions(device="cpu", quiet=True, **options), handle_signals=False)

    a = run_suite(spec, **kw(shard="0/2"))
    assert a.run_id.startswith("planted-") and a.status == "complete"
    again = run_suite(spec, **kw(shard="0/2"))  # same derived run id: the same night
    assert again.run_id == a.run_id
    assert sum(again.counts.values()) == 0 and again.already_measured == a.selected_cases
    assert run_status(url, a.run_id) == "running"  # shard 1/2 has not run yet
    b = run_suite(spec, **kw(shard="1/2"))
    assert b.run_id == a.run_id
    assert a.selected_cases + b.selected_cases == 4
    frame = results(url, run_id=a.run_id)
    assert len(frame) == 4 and frame["case_key"].is_unique
    assert sorted(frame["shard"].unique()) == ["0/2", "1/2"]
    assert run_status(url, a.run_id) == "complete"


# ---------------------------------------------------------------- real ops, real numbers


def test_real_spec_end_to_end_agrees_with_an_independent_timing(tmp_path: Path) -> None:
    from rooflab.runners.machine.environment import capture
    from rooflab.suite.ops.registry import get_op
    from rooflab.suite.spec import expand, load_spec

    spec_path = write(tmp_path, "e2e.yaml", REAL_SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    # One intra-op thread on both sides: on a loaded machine a second OpenMP thread waiting for a
    # core costs milliseconds at random, which would compare the scheduler rather than the timings.
    # The command runs in this process (its workers are real processes all the same); a `rooflab run`
    # process whose stdout holds its --json summary only: the PostgreSQL night of
    # tests/runners/cluster/test_cluster_e2e.py (run where a test server is given, as CI gives one).
    done = CliRunner().invoke(app, ["run", str(spec_path), "--db", url, "--device", "cpu", "--json", "--quiet",
                                    "--threads", "1"])
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout)  # --json --quiet: stdout holds the JSON summary only
    assert summary["status"] == "complete" and summary["counts"]["ok"] == 3
    frame = results(url, run_id=summary["run_id"]).set_index("case_key")
    assert set(frame["status"]) == {"ok"}
    assert frame["torch_version"].notna().all() and frame["device_kind"].eq("cpu").all()

    _, device = capture("cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        independent = {case.case_key: independent_median_ms(case, device)
                       for case in expand(load_spec(spec_path), "cpu")}
    finally:
        torch.set_num_threads(threads)
    for case in expand(load_spec(spec_path), "cpu"):
        op = get_op(case.op)
        row = frame.loc[case.case_key]
        params = op.resolved_params(case.params)
        assert row["flops"] == op.flops(params, case.dtype) and row["bytes"] == op.bytes(params, case.dtype)
        assert (row["bytes_read"], row["bytes_written"]) == (op.bytes_read(params, case.dtype),
                                                             op.bytes_written(params, case.dtype))
        assert row["gbps"] == pytest.approx(row["bytes"] / (row["median_ms"] * 1e-3) / 1e9, rel=1e-6)
        independent_ms = independent[case.case_key]
        ratio = row["median_ms"] / independent_ms
        assert 1 / 3 < ratio < 3, f"{case.case_key}: rooflab {row['median_ms']:.4f} ms vs {independent_ms:.4f} ms"


def independent_median_ms(case, device) -> float:
    """The op's own timed callable, timed with perf_counter around each call (no rooflab timing code)."""
    from rooflab.suite.ops.registry import get_op

    prepared = get_op(case.op).prepare(case, device, 1234)
    for _ in range(5):
        prepared.fn()
    samples = []
    for _ in range(41):
        start = time.perf_counter()
        prepared.fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


# ---------------------------------------------------------------- bad input: exit 2, nothing written


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "spec_text, expected",
    [
        (None, "spec file not found"),
        ("name: x\nbenchmarks: [\n", "line"),
        ("name: x\nbenchmarks:\n  - name: a\n    op: no_such_op\n", "no_such_op"),
        ("name: x\nbenchmarks:\n  - name: a\n    op: copy\n    colour: red\n", "colour"),
    ],
)
def test_bad_spec_exits_2_and_creates_no_database(tmp_path: Path, spec_text: str | None, expected: str) -> None:
    spec = tmp_path / "bad.yaml"
    if spec_text is not None:
        spec.write_text(spec_text, encoding="utf-8")
    db = tmp_path / "r.db"
    code, out = invoke(str(spec), "--db", f"sqlite:///{db}")
    assert code == 2, out
    assert "error:" in out and expected in out
    assert "Traceback" not in out
    assert not db.exists()


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--max-time-ms", "-5"], "--max-time-ms"),
        (["--warmup-ms", "-1"], "--warmup-ms"),
        (["--min-time-ms", "-0.5"], "--min-time-ms"),
        (["--target-precision", "1.5"], "(0, 1)"),
        (["--target-precision", "0"], "(0, 1)"),
        (["--min-samples", "0"], "--min-samples"),
        (["--min-samples", "10", "--max-samples", "5"], "min_samples (10) exceeds max_samples (5)"),
        (["--shard", "2/2"], "--shard"),
        (["--shard", "half"], "--shard"),
        (["--device", "cuda:7"], "unknown device"),
        (["--device", "tpu"], "unknown device"),
        (["--devices", "5"], "unknown device"),
        (["--device", "cpu", "--devices", "all"], "not both"),
        (["--seed", "-1"], "--seed"),
        (["--case-timeout-s", "0"], "--case-timeout-s"),
        (["--filter", "op"], "op"),
        (["--filter", "op=nothing_like_it"], "no case"),
    ],
)
def test_bad_flags_exit_2_and_create_no_database(tmp_path: Path, flags: list[str], expected: str) -> None:
    spec = write(tmp_path, "ok.yaml", "name: ok\nbenchmarks:\n  - name: c\n    op: copy\n    params: {n: 1024}\n")
    db = tmp_path / "r.db"
    code, out = invoke(str(spec), "--db", f"sqlite:///{db}", *flags)
    assert code == 2, out
    assert "error:" in out and expected in out, out
    assert "Traceback" not in out
    assert not db.exists()


def test_a_spec_with_nothing_for_this_device_kind_exits_2(tmp_path: Path) -> None:
    spec = write(tmp_path, "gpu.yaml", "name: g\nbenchmarks:\n  - name: c\n    op: copy\n    devices: [cuda]\n")
    db = tmp_path / "r.db"
    code, out = invoke(str(spec), "--db", f"sqlite:///{db}", "--device", "cpu")
    assert code == 2 and "no benchmark of g runs on a cpu device" in out, out
    assert not db.exists()


def test_resume_of_a_missing_database_or_run_exits_2(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    code, out = invoke("--resume", "nope", "--db", f"sqlite:///{db}")
    assert code == 2 and "no database" in out
    assert not db.exists()
    code, out = invoke("--db", f"sqlite:///{db}")
    assert code == 2 and "--resume" in out
    spec = write(tmp_path, "ok.yaml", "name: ok\nbenchmarks:\n  - name: c\n    op: copy\n    params: {n: 1024}\n")
    code, out = invoke(str(spec), "--resume", "nope", "--db", f"sqlite:///{db}")
    assert code == 2 and "no database" in out
    assert not db.exists()


# ---------------------------------------------------------------- pieces of the session


def test_devices_all_without_cuda_is_one_device_per_core(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """On a machine without a GPU, `--devices all` is one device per physical core (its first logical
    CPU), `--devices 0,1` names cores; with GPUs they name GPUs as before."""
    import os

    from rooflab.runners.errors import UserInputError
    from rooflab.runners.machine import cpuinfo, environment
    from rooflab.runners.orchestration.run_options import resolve_devices

    allowed = sorted(os.sched_getaffinity(0))
    # a planted topology: each allowed CPU a core of its own, plus an SMT sibling of the first one
    for cpu in [*allowed, 1000]:
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0")
        (topo / "core_id").write_text(str(allowed[0] if cpu == 1000 else cpu))
    monkeypatch.setattr(cpuinfo, "SYSFS_CPU", str(tmp_path))
    assert cpuinfo.core_cpus(str(tmp_path), set(allowed) | {1000}) == allowed  # the sibling is not a core

    monkeypatch.setattr(environment, "list_devices", lambda: ["cpu"])
    monkeypatch.setattr(environment, "best_device", lambda: "cpu")
    assert resolve_devices("auto", "all") == [f"cpu:{c}" for c in allowed]
    assert resolve_devices("auto", f"{allowed[-1]},{allowed[0]}") == [f"cpu:{allowed[-1]}", f"cpu:{allowed[0]}"]
    assert resolve_devices(f"cpu:{allowed[0]}", None) == [f"cpu:{allowed[0]}"]
    with pytest.raises(UserInputError, match="unknown device 'cpu:4096': this process may run on CPUs"):
        resolve_devices("auto", "4096")
    with pytest.raises(UserInputError, match="the whole CPU and its cores at once"):
        resolve_devices("auto", f"cpu,cpu:{allowed[0]}")
    assert resolve_devices("auto", None) == ["cpu"]
    monkeypatch.setattr(environment, "list_devices", lambda: ["cuda:0", "cuda:1", "cpu"])
    assert resolve_devices("auto", "all") == ["cuda:0", "cuda:1"]
    assert resolve_devices("auto", "1,0,1") == ["cuda:1", "cuda:0"]
    assert resolve_devices("cuda", None) == ["cuda:0"]


def test_the_cpu_asked_for_by_name_needs_no_list_of_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing the GPUs imports torch (seconds) into the supervisor, which needs none for the CPU."""
    from rooflab.runners.machine import environment
    from rooflab.runners.orchestration.run_options import resolve_devices

    def listed() -> list[str]:
        raise AssertionError("the GPUs were listed")

    monkeypatch.setattr(environment, "list_devices", listed)
    assert resolve_devices("cpu", None) == resolve_devices(" CPU ", None) == ["cpu"]
    with pytest.raises(AssertionError, match="listed"):
        resolve_devices("cuda:0", None)


def test_run_ids_are_shared_by_shards_of_a_night_and_unique_otherwise() -> None:
    from datetime import UTC, datetime

    from rooflab.runners.orchestration.run_options import derive_run_id

    night = datetime(2026, 11, 21, 23, 59, tzinfo=UTC)
    assert derive_run_id("nightly", sharded=True, now=night) == "nightly-20261121"
    a = derive_run_id("quick", sharded=False, now=night)
    b = derive_run_id("quick", sharded=False, now=night)
    assert a.startswith("quick-20261121T235900Z-") and a != b


def test_timing_overrides_are_checked_and_typed() -> None:
    from rooflab.runners.errors import UserInputError
    from rooflab.runners.orchestration.run_options import validate_timing_overrides

    assert validate_timing_overrides({"min_samples": 20.0, "max_time_ms": 50, "warmup_ms": None}) == {
        "min_samples": 20,
        "max_time_ms": 50,
    }
    with pytest.raises(UserInputError, match="--max-time-ms"):
        validate_timing_overrides({"max_time_ms": 0})
    with pytest.raises(UserInputError, match="whole number"):
        validate_timing_overrides({"min_samples": 2.5})
    with pytest.raises(UserInputError, match="finite"):
        validate_timing_overrides({"warmup_ms": float("nan")})


def test_log_lines_and_summary_say_what_was_measured(capsys: pytest.CaptureFixture[str]) -> None:
    import io
    from datetime import UTC, datetime

    from rich.console import Console

    from rooflab.record import CaseRecord, record_from_columns
    from rooflab.runners.orchestration.progress import LogProgress, render_summary
    from rooflab.suite.case import Case

    case = Case("copy", 1, "pointwise", "eager", "float32", "cold", "launch", {"n": 1 << 20})
    record = record_from_columns(
        run_id="r", case=CaseRecord(case.case_key, "copy", 1, "pointwise", "eager", "float32", {"n": 1 << 20}),
        device_fingerprint="f", cache="cold", timing_mode="launch", status="ok",
        measured_at=datetime.now(UTC), median_ms=0.5, p10_ms=0.45, p90_ms=0.6, n_samples=40, mean_ms=0.51,
        min_ms=0.44, max_ms=0.7, iqr_ms=0.08, std_ms=0.05,
        rel_ci_halfwidth=0.004, flops=0, bytes=8 << 20,
    )
    stream = io.StringIO()
    log = LogProgress(stream)
    log.start(2, ["cpu"])
    log.case_done("cpu", case, record, 1.0)
    line = stream.getvalue().strip()
    assert line.startswith("[1/2] ok ") and "copy eager float32 cold/launch n=1048576" in line
    assert "median 500 us ±0.4%" in line and "[p10 450 us, p90 600 us, n=40]" in line
    assert "16.8 GB/s" in line and "TFLOP/s" not in line  # copy has no FLOPs

    out = io.StringIO()
    render_summary(
        {
            "run_id": "quick-1", "suite": "quick", "status": "interrupted", "exit_code": 130,
            "db_url": "sqlite:///r.db", "shard": None, "selected_cases": 6,
            "counts": {"ok": 3, "failed": 1}, "slowest": [], "already_measured": 0, "unmeasured": 2,
            "devices": [], "elapsed_s": 1.0,
        },
        Console(file=out, width=200),
    )
    text = out.getvalue()
    assert "quick-1: interrupted" in text and "total" in text
    assert "rooflab run --resume quick-1 --db sqlite:///r.db" in text
