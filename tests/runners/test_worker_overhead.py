"""Per-case work the worker no longer repeats: the float64 check across cache and timing modes of
one shape, and gc/empty_cache after cases that ended normally; the phase split it reports."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import tests.runners.planted_ops  # noqa: F401 - registers the planted ops
from rooflab.runners.orchestration import prepare, worker
from rooflab.runners.orchestration.messages import PHASES, CaseRequest
from rooflab.runners.orchestration.prepare import check_key
from rooflab.runners.orchestration.worker import run_case
from rooflab.suite.ops.registry import get_op
from tests.runners.test_worker import CPU, planted


@pytest.fixture(autouse=True)
def fresh_verdicts() -> Iterator[None]:
    prepare._CHECK_VERDICTS.clear()
    yield
    prepare._CHECK_VERDICTS.clear()


class CountingChecks:
    """Wraps an op's prepare so that every check call is counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, op_name: str) -> None:
        self.calls = 0
        op = get_op(op_name)
        real = op.prepare

        def prepare(case: Any, device: Any, seed: int) -> Any:
            prepared = real(case, device, seed)
            check = prepared.check

            def counted(output: Any) -> Any:
                self.calls += 1
                return check(output)

            return replace(prepared, check=counted)

        monkeypatch.setattr(op, "prepare", prepare)


def run(case):
    return run_case(CaseRequest(case, seed=7), CPU)


def test_check_runs_once_per_shape_across_cache_and_timing_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingChecks(monkeypatch, "planted_scale")
    hot, cold = planted("planted_scale", cache="hot"), planted("planted_scale", cache="cold")
    assert check_key(hot) == check_key(cold) and hot.case_key != cold.case_key
    first, second = run(hot), run(cold)
    assert (first.status, second.status) == ("ok", "ok")
    assert counter.calls == 1
    assert not first.check_cached and second.check_cached
    assert second.method.first_call_ms is not None and second.method.first_call_ms > 0  # still made and timed
    other = run(planted("planted_scale", n=8192))  # another shape is checked
    assert other.status == "ok" and not other.check_cached and counter.calls == 2


def test_a_wrong_op_is_incorrect_in_every_mode_of_its_shape() -> None:
    first = run(planted("planted_wrong", cache="hot"))
    second = run(planted("planted_wrong", cache="cold"))
    assert first.status == second.status == "incorrect"
    assert second.check_cached and second.error == first.error and second.stats is None


def test_no_gc_or_cache_emptying_after_a_normal_case(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[str] = []
    monkeypatch.setattr(worker, "_release", lambda device: released.append(device.torch_device))
    assert run(planted("planted_scale")).status == "ok"
    assert run(planted("planted_wrong")).status == "incorrect"
    assert released == []
    assert run(planted("planted_oom")).status == "failed"  # an out-of-memory error: release
    assert released == ["cpu"]


def test_gc_collect_runs_only_after_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    collected: list[int] = []

    def collect(*args: object) -> int:
        collected.append(1)
        return 0

    monkeypatch.setattr(worker.gc, "collect", collect)
    run(planted("planted_scale"))
    assert collected == []
    run(planted("planted_raise"))
    assert collected == [1]


def test_phases_are_reported_and_add_up_to_no_more_than_the_case() -> None:
    out = run(planted("planted_scale"))
    assert out.status == "ok"
    assert set(out.phases_ms) == set(PHASES)
    assert all(v >= 0 for v in out.phases_ms.values())
    assert sum(out.phases_ms.values()) <= out.elapsed_s * 1e3 + 1e-6
    assert out.phases_ms["sampling"] > 0 and out.phases_ms["warmup"] > 0


def test_free_memory_counts_the_allocators_unused_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from rooflab.suite.device import DeviceInfo

    gpu = DeviceInfo(kind="cuda", name="fake", torch_device="cuda:0", memory_bytes=80 << 30, l2_bytes=50 << 20)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev: (10 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev: 30 << 30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev: 2 << 30)
    # 10 GiB free at the driver + 28 GiB cached by torch and unused: a 30 GiB case fits
    assert prepare._available_memory_bytes(gpu) == 38 << 30


class CountingCalls:
    """Wraps an op's prepared callable so that every call is counted, and measure so that each
    timing's first_call_ms keyword and result are kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, op_name: str) -> None:
        from rooflab.runners.engine import timing

        self.calls = 0
        self.given: list[float | None] = []
        self.results: list[Any] = []
        op = get_op(op_name)
        real_prepare, real_measure = op.prepare, timing.measure

        def prepare(case: Any, device: Any, seed: int) -> Any:
            prepared = real_prepare(case, device, seed)
            fn = prepared.fn

            def counted() -> Any:
                self.calls += 1
                return fn()

            return replace(prepared, fn=counted)

        def measure(fn: Any, **kwargs: Any) -> Any:
            self.given.append(kwargs.get("first_call_ms"))
            result = real_measure(fn, **kwargs)
            self.results.append(result)
            return result

        monkeypatch.setattr(op, "prepare", prepare)
        monkeypatch.setattr(timing, "measure", measure)

    def timed_calls(self) -> int:
        return sum(r.method.warmup_calls + r.stats.n_samples for r in self.results)


@pytest.mark.parametrize("cache", ["hot", "cold"])
def test_the_worker_makes_the_first_call_once(monkeypatch: pytest.MonkeyPatch, cache: str) -> None:
    counter = CountingCalls(monkeypatch, "planted_scale")
    out = run(planted("planted_scale", cache=cache))
    assert out.status == "ok" and out.method.first_call_ms is not None and out.method.first_call_ms > 0
    assert counter.given == [out.method.first_call_ms]  # the worker's own first call, handed to the engine
    assert counter.calls == 1 + counter.timed_calls()  # one first call, then only warmup and samples


def test_crosscheck_rounds_reuse_the_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from rooflab.runners.crosscheck.session import check_case

    counter = CountingCalls(monkeypatch, "planted_scale")
    assert check_case(planted("planted_scale"), CPU, [], rounds=3) == []
    assert len(counter.results) == 3 and len(set(counter.given)) == 1
    assert counter.given[0] is not None and counter.given[0] > 0
    assert counter.calls == 1 + counter.timed_calls()
