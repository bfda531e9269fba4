"""The worker's per-case logic, run in this process on the CPU with planted ops."""
from __future__ import annotations

import pickle
from typing import Any

import pytest

import tests.runners.planted_ops  # noqa: F401 - registers the planted ops
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.runners.orchestration.prepare import case_seed, generic_skip_reason
from rooflab.runners.orchestration.worker import run_case
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.registry import get_op
from rooflab.suite.timing import TimingSettings
from tests.runners.fake_proc import busy_others

FAST = TimingSettings(warmup_ms=1.0, warmup_calls=2, min_samples=5, max_samples=200, min_time_ms=2.0, max_time_ms=50.0)
CPU = DeviceInfo(kind="cpu", name="test cpu", torch_device="cpu", memory_bytes=8 * 1024**3, l2_bytes=1024**2)


def planted(op: str, *, n: int = 4096, cache: str = "hot", timing_mode: str = "launch",
            fraction: float | None = None) -> Case:
    return Case(
        op=op,
        op_version=1,
        family="pointwise",
        backend="eager",
        dtype="float32",
        cache=cache,
        timing_mode=timing_mode,
        params={"n": n, "sleep_ms": 0.0},
        timing=FAST,
        max_memory_fraction=fraction,
    )


def run(case: Case, overrides: dict | None = None, device: DeviceInfo = CPU) -> CaseOutcome:
    outcome = run_case(CaseRequest(case, seed=7, timing_overrides=overrides or {}), device)
    pickle.loads(pickle.dumps(outcome))  # what crosses the pipe must be plain data
    return outcome


@pytest.mark.parametrize("cache", ["hot", "cold"])
def test_correct_op_is_measured_with_its_samples(cache: str) -> None:
    out = run(planted("planted_scale", cache=cache))
    assert out.status == "ok", out.error
    assert out.error is None
    assert out.method is not None
    assert out.method.clock == "perf_counter"
    assert out.stats is not None
    assert out.stats.n_samples == len(out.samples_ms) >= FAST.min_samples
    assert min(out.samples_ms) <= out.stats.median_ms <= max(out.samples_ms)
    assert out.method.first_call_ms is not None and out.method.first_call_ms > 0
    assert out.method.stop_reason in ("converged", "clock_resolution", "noise_settled", "max_time", "max_samples")
    assert (out.method.flush_bytes > 0) == (cache == "cold")
    assert out.method.sync_method == "none"  # host time on a CPU: nothing to hold
    assert out.method.flush_method == ("write_sweep" if cache == "cold" else "none")  # cold means after a write
    assert out.method.pace == "back_to_back"


def test_flush_method_and_pace_come_from_the_settings_and_are_recorded() -> None:
    out = run(planted("planted_scale", cache="cold"), {"flush_method": "read_sweep", "pace": "idle"})
    assert out.status == "ok", out.error
    assert out.method is not None
    assert (out.method.flush_method, out.method.pace) == ("read_sweep", "idle")
    assert out.method.flush_bytes >= 2 * CPU.l2_bytes


def test_launch_probe_is_timed_as_host_time_per_back_to_back_launch() -> None:
    from rooflab.runners.engine.timing import HOST_LAUNCHES_PER_SAMPLE
    from rooflab.suite.ops.registry import get_op

    op = get_op("launch")
    case = Case(op="launch", op_version=op.version, family="overhead", backend="eager", dtype="float32",
                cache="hot", timing_mode="launch", params={"n": 1}, timing=FAST)
    out = run(case)
    assert out.status == "ok", out.error
    assert out.method is not None and out.stats is not None
    assert out.method.clock == "perf_counter" and out.method.sync_method == "host_sync"
    assert out.method.launches_per_sample == HOST_LAUNCHES_PER_SAMPLE
    assert out.method.flush_bytes == 0 and out.method.flush_method == "none"
    assert 0 < out.stats.median_ms < 1.0  # a torch.add on one element: micro-, not milliseconds


def test_cli_overrides_reach_the_timing_engine() -> None:
    # a minimum time far beyond 40 samples keeps the converging exits shut (FAST's 2 ms was reached
    # by 40 samples on a loaded host, and the run converged), so 40 samples end it at max_samples
    out = run(planted("planted_scale"), {"min_samples": 40, "max_samples": 40, "min_time_ms": 60_000.0,
                                         "max_time_ms": 120_000.0})
    assert out.status == "ok", out.error
    assert out.stats is not None and out.stats.n_samples == 40
    assert out.method is not None and out.method.stop_reason == "max_samples"


def test_exception_in_the_call_is_failed_with_type_and_message() -> None:
    out = run(planted("planted_raise"))
    assert out.status == "failed"
    assert out.error == "RuntimeError: planted failure in the timed call"
    assert out.stats is None and out.samples_ms == ()
    assert not out.worker_unusable


def test_out_of_memory_is_failed_and_the_worker_goes_on() -> None:
    out = run(planted("planted_oom"))
    assert out.status == "failed"
    assert out.error is not None and out.error.startswith("OutOfMemoryError: CUDA out of memory")
    after = run(planted("planted_scale"))
    assert after.status == "ok", after.error


def test_wrong_output_is_incorrect_without_a_performance_figure() -> None:
    out = run(planted("planted_wrong"))
    assert out.status == "incorrect"
    assert out.error is not None and "max abs error 0.25" in out.error
    assert out.stats is None and out.samples_ms == ()


def test_too_big_for_memory_is_skipped_before_prepare() -> None:
    out = run(planted("planted_huge"))  # its prepare raises AssertionError if reached
    assert out.status == "skipped"
    assert out.error is not None and out.error.startswith("would not fit: needs")


def test_memory_fraction_constraint_skips() -> None:
    small = DeviceInfo(kind="cpu", name="small", torch_device="cpu", memory_bytes=64 * 1024, l2_bytes=1024**2)
    case = planted("planted_scale", n=4096, fraction=0.25)  # needs 32 KiB > 0.25 x 64 KiB
    out = run(case, device=small)
    assert out.status == "skipped"
    assert out.error is not None and "max_memory_fraction 0.25" in out.error
    assert run(planted("planted_scale", n=1024, fraction=0.25), device=small).status == "ok"


def test_graph_mode_is_skipped_on_a_cpu() -> None:
    out = run(planted("planted_scale", timing_mode="graph"))
    assert out.status == "skipped"
    assert out.error == "graph timing mode needs CUDA"


def test_unsupported_dtype_is_skipped_by_the_generic_check() -> None:
    case = Case("planted_scale", 1, "pointwise", "eager", "float16", "hot", "launch", {"n": 16}, timing=FAST)
    reason = generic_skip_reason(get_op("planted_scale"), case, CPU)
    assert reason is not None and "dtype float16 is not supported" in reason


def test_case_seed_depends_on_seed_and_key_only() -> None:
    a, b = planted("planted_scale", n=16), planted("planted_scale", n=32)
    assert case_seed(0, a.case_key) == case_seed(0, a.case_key)
    assert case_seed(0, a.case_key) != case_seed(1, a.case_key)
    assert case_seed(0, a.case_key) != case_seed(0, b.case_key)
    assert 0 <= case_seed(123, b.case_key) < 2**31


def test_a_lost_device_context_is_a_crash_and_retires_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import rooflab.runners.orchestration.worker as worker

    monkeypatch.setattr(worker, "_context_usable", lambda device: False)  # as after an illegal memory access
    out = run(planted("planted_raise"))
    assert out.status == "crashed"
    assert out.error == "device context lost: RuntimeError: planted failure in the timed call"
    assert out.worker_unusable


def test_graph_mode_of_an_op_that_cannot_be_captured_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    import rooflab.runners.orchestration.prepare as prepare

    # a CUDA device whose tensors live on the host: the case gets as far as prepare, which is where
    # an op says that its call cannot be captured (graph_safe=False)
    gpu = DeviceInfo(kind="cuda", name="fake gpu", torch_device="cpu", memory_bytes=8 * 1024**3, l2_bytes=1024**2)
    monkeypatch.setattr(prepare, "_available_memory_bytes", lambda device: None)
    out = run(planted("planted_uncapturable", timing_mode="graph"), device=gpu)
    assert out.status == "skipped", out.error
    assert out.error is not None and "cannot be captured in a CUDA graph" in out.error
    assert out.stats is None and out.samples_ms == ()
    assert run(planted("planted_uncapturable")).status == "ok"  # launch mode measures it


def test_a_case_run_under_fake_load_is_contended(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import os

    import rooflab.runners.machine.contention as contention

    loadavg = tmp_path / "loadavg"
    busy = 4 * (os.cpu_count() or 1) + 1  # runnable threads, none of them the case's own
    loadavg.write_text(f"{busy - 0.5:.2f} 1.00 1.00 {busy}/400 1\n")
    monkeypatch.setattr(contention, "LOADAVG", str(loadavg))
    monkeypatch.setattr(contention, "PROC", str(busy_others(tmp_path / "proc", busy)))
    out = run(planted("planted_scale"))
    assert out.status == "ok", out.error
    assert out.machine.quality == "contended"
    assert any(r.startswith("load ") and "above" in r for r in out.machine.quality_reasons), out.machine.quality_reasons


def test_a_quiet_case_has_a_quality_and_its_threads(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import rooflab.runners.machine.contention as contention

    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.00 0.00 0.00 1/100 1\n")
    monkeypatch.setattr(contention, "LOADAVG", str(loadavg))
    monkeypatch.setattr(contention, "PROC_STAT", str(tmp_path / "no-stat"))
    out = run_case(CaseRequest(planted("planted_scale"), seed=7, cpu_threads=1), CPU)
    assert out.status == "ok", out.error
    assert out.machine.cpu_threads == 1
    assert out.machine.quality in ("good", "noisy")  # noisy only when this machine's timing did not converge
    assert (out.machine.quality == "noisy") == bool(out.machine.quality_reasons)


def test_outcome_crosses_a_pipe_as_typed_records() -> None:
    """The statistics arrive as the Statistics of the samples, not a dict to read back with `.get`."""
    import multiprocessing

    from rooflab.record import Statistics
    from rooflab.runners.engine.stats import summarize

    sent = run(planted("planted_scale"))
    assert sent.status == "ok", sent.error
    here, there = multiprocessing.Pipe()
    here.send(("result", sent))
    kind, got = there.recv()
    here.close()
    there.close()
    assert kind == "result" and got == sent
    assert isinstance(got.stats, Statistics)
    assert got.stats == summarize(got.samples_ms)


def test_measurement_record_is_built_from_the_sample_stats() -> None:
    """Known samples: the stored record carries exactly their summary, and a failed case none of it."""
    import random

    from rooflab.db.measurement_columns import measurement_row
    from rooflab.record import TimingMethod, WorkModel
    from rooflab.runners.engine.stats import summarize
    from rooflab.runners.orchestration.records import build_record

    rng = random.Random(11)
    samples = tuple(1.0 + rng.random() for _ in range(25))
    stats = summarize(samples)
    case = planted("planted_scale")
    kw: dict[str, Any] = dict(run_id="r", device_fingerprint="fp", device_uuid=None, shard=None,
                              work_model=lambda c: WorkModel(flops=10, bytes=20))
    method = TimingMethod(cache=case.cache, timing_mode=case.timing_mode, stop_reason="max_samples")
    ok = CaseOutcome(case.case_key, "ok", samples_ms=samples, stats=stats, method=method)
    record = build_record(case, ok, **kw)
    assert record.stats is stats and record.median_ms == sorted(samples)[12]
    row = measurement_row(record)  # the stored columns are the statistics' own fields
    assert (row["p10_ms"], row["p90_ms"], row["iqr_ms"], row["std_ms"]) == (stats.p10_ms, stats.p90_ms, stats.iqr_ms,
                                                                          stats.std_ms)
    assert row["n_samples"] == 25 and row["rel_ci_halfwidth"] == stats.rel_ci_halfwidth
    assert row["stop_reason"] == "max_samples" and row["flops"] == 10 and row["bytes"] == 20
    failed = build_record(case, CaseOutcome(case.case_key, "failed", "boom", stats=stats), **kw)
    failed_row = measurement_row(failed)
    assert failed.median_ms is None and failed_row["median_ms"] is None and failed_row["n_samples"] == 0
    assert failed_row["cache"] == case.cache and failed_row["timing_mode"] == case.timing_mode
