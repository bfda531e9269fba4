"""The profiled child (runners/counters/child.py) opens the NVTX range that ncu's --nvtx-include
selects around the one timed call, and around nothing else: preparing the case, its first call
and its check (compilation, autotuning, the float64 reference) must stay outside, or ncu would
count their kernels too. On a CPU `nvtx_range` opens nothing, so the range is replaced here by a
recorder, and the op's prepare, call and check record themselves in the same list."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch

from rooflab.runners.counters import child
from rooflab.runners.counters.ncu import RANGE
from rooflab.runners.orchestration import prepare as prepare_module
from rooflab.runners.orchestration.messages import CaseRequest
from rooflab.suite.ops.registry import get_op
from rooflab.suite.spec import expand, load_spec


def _recorded(tmp_path, monkeypatch, events: list[Any], cache: str = "cold") -> Any:
    """The copy case of a one-line spec, its prepare, call, check, synchronisations, the NVTX range and
    any sweep recording themselves in `events`."""

    @contextlib.contextmanager
    def recorder(name: str, on_cuda: bool) -> Iterator[None]:
        events.append(("push", name))
        try:
            yield
        finally:
            events.append(("pop", name))

    op = get_op("copy")
    real_prepare = op.prepare

    def recording_prepare(case, device, seed):
        events.append("prepare")
        prepared = real_prepare(case, device, seed)
        fn, check = prepared.fn, prepared.check

        def call():
            events.append("call")
            return fn()

        def checked(out):
            events.append("check")
            return check(out)

        return replace(prepared, fn=call, check=checked)

    real_sync = prepare_module.synchronize

    def recording_sync(*args: Any) -> None:
        events.append("sync")
        real_sync(*args)

    real_flusher = child.make_flusher

    def recording_flusher(device: Any, method: str, flush_bytes: int) -> Any:
        sweep = real_flusher(device, method, flush_bytes)
        events.append(("sweep", method, sweep.flush_bytes))  # made: one sweep

        class Recording:
            def flush(self) -> None:
                events.append(("sweep", method, sweep.flush_bytes))
                sweep.flush()

        return Recording()

    monkeypatch.setattr(child, "nvtx_range", recorder)
    monkeypatch.setattr(child, "make_flusher", recording_flusher)
    monkeypatch.setattr(op, "prepare", recording_prepare)
    monkeypatch.setattr(prepare_module, "synchronize", recording_sync)
    monkeypatch.setattr(prepare_module, "_CHECK_VERDICTS", {})  # this process's verdicts: the check runs
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: one\nbenchmarks:\n  - {name: copy, op: copy, backends: [eager], cache: [" + cache
                    + "], params: {n: 4096}}\n")
    (case,) = expand(load_spec(str(spec)), "cpu")
    return case


def _profile(request: child.ChildRequest) -> dict[str, Any]:
    threads = torch.get_num_threads()  # a CPU case sets the process's intra-op threads, as a worker does
    try:
        return child.profile_one_call(request)
    finally:
        torch.set_num_threads(threads)


def test_the_nvtx_range_encloses_the_one_timed_call_and_nothing_else(tmp_path, monkeypatch) -> None:
    events: list[Any] = []
    case = _recorded(tmp_path, monkeypatch, events)
    got = _profile(child.ChildRequest(CaseRequest(case=case, seed=0), "cpu", str(tmp_path / "r")))
    assert got["status"] == "ok", got
    assert events.count(("push", RANGE)) == 1 and events.count(("pop", RANGE)) == 1
    start, end = events.index(("push", RANGE)), events.index(("pop", RANGE))
    assert [e for e in events[start + 1:end] if e != "sync"] == ["call"], events  # the one call, nothing else
    assert "sync" in events[start + 1:end]  # waited for inside the range: its kernels ran there
    before = events[:start]
    assert before.index("prepare") < before.index("call") < before.index("check"), events  # all before it
    assert [e for e in events[end + 1:] if e != "sync"] == [], events
    assert not [e for e in events if isinstance(e, tuple) and e[0] == "sweep"]  # the profiling pass sweeps nothing


@pytest.mark.parametrize("cache", ["cold", "hot"])
def test_the_write_back_pass_sweeps_before_the_range_and_twice_after_the_call_inside_it(
        tmp_path, monkeypatch, cache: str) -> None:
    """Before the range a read sweep of the size asked for cleans the cache (a hot case then warms it
    with one more call); inside, the call, waited for, then the two sweeps, waited for."""
    events: list[Any] = []
    case = _recorded(tmp_path, monkeypatch, events, cache)
    got = _profile(child.ChildRequest(CaseRequest(case=case, seed=0), "cpu", str(tmp_path / "r"), sweep_bytes=1 << 16))
    assert got["status"] == "ok", got
    start, end = events.index(("push", RANGE)), events.index(("pop", RANGE))
    sweep = ("sweep", "read_sweep", 1 << 16)
    inside = events[start + 1:end]
    assert [e for e in inside if e != "sync"] == ["call", sweep, sweep], events
    assert inside[1] == "sync" and inside[-1] == "sync"  # the call finished before the sweeps, they before the end
    before = [e for e in events[:start] if e != "sync"]
    check = before.index("check")
    assert before[check + 1:] == [sweep] + (["call"] if cache == "hot" else []), events


def test_nvtx_range_pushes_and_pops_the_range_on_cuda_even_when_the_call_raises(monkeypatch) -> None:
    stack: list[str] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: stack.append(f"push {name}"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: stack.append("pop"))
    with child.nvtx_range(RANGE, on_cuda=True):
        stack.append("call")
    assert stack == [f"push {RANGE}", "call", "pop"]
    stack.clear()
    with pytest.raises(RuntimeError), child.nvtx_range(RANGE, on_cuda=True):
        raise RuntimeError("the call failed")
    assert stack == [f"push {RANGE}", "pop"]
    stack.clear()
    with child.nvtx_range(RANGE, on_cuda=False):
        pass
    assert stack == []  # a CPU has no range to open
