"""The `nvbench` peer: NVIDIA's nvbench through its Python package `cuda-bench` (`cuda.bench`).

`cuda.bench` runs its benchmarks once per process (a second `run_all_benchmarks` is refused with
"benchmarks were already executed"), so this peer times each case in a child process of its own
(`time_rounds`): the child prepares the case exactly as a worker does (same request, same seed),
registers one benchmark with a `round` axis of as many values as the cross-check has rounds, runs it
once and hands back one figure per round. The benchmark launches the prepared callable on the
stream nvbench hands over (`launch.get_stream()`, wrapped as a torch external stream, so torch and
rooflab's CuPy ops, which follow torch's current stream, enqueue there). nvbench's results come
back through its JSON output (`--json FILE`), whose summaries hold seconds:
- a cold case gets nvbench's cold measurement: L2 flushed before each sample, the stream held
  behind a blocking kernel while the launch is enqueued; the figure is the median of the cold
  GPU times (`nv/cold/time/gpu/median`, the mean where that is missing);
- a hot case gets the batch measurement: launches back to back on a warm cache, total / launches
  (`nv/batch/time/gpu/mean`: nvbench keeps no per-launch samples there).
An op that needs its own synchronisation is run with `sync=True`, which turns off the blocking
kernel and the batch (so such a hot case is not meaningful for this peer and raises).
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rooflab.runners.crosscheck.mode import Clock, Sample, TimerMode, cold_mode, hot_mode
from rooflab.runners.crosscheck.peer import Call, PeerClock, PeerName, PeerTiming, package_version, run_in_own_process
from rooflab.runners.engine.stream_hold import HoldMode
from rooflab.runners.orchestration.messages import CaseOutcome
from rooflab.runners.orchestration.prepare import ready_case
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.registry import all_ops
from rooflab.vocab import CacheMode, Pace

BENCHMARK_NAME = "rooflab_crosscheck"
TIMEOUT_S = 15.0  # nvbench's default per measurement
CHILD_TIMEOUT_S = 120.0  # per round: start, prepare and measure in the child


@dataclass
class _Job:
    fn: Call
    torch_device: str
    sync: bool


_JOB: dict[str, _Job] = {}
ROUND_AXIS = "round"


def _benchmark(state: Any) -> None:
    import torch

    job = _JOB["job"]
    device = torch.device(job.torch_device)
    streams: dict[int, Any] = {}

    def launcher(launch: Any) -> None:
        address = launch.get_stream().addressof()
        stream = streams.get(address)
        if stream is None:
            stream = streams[address] = torch.cuda.ExternalStream(address, device=device)
        with torch.cuda.stream(stream):
            job.fn()

    state.exec(launcher, batched=not job.sync, sync=job.sync)


def run_in_child(request: Any, device: DeviceInfo, rounds: int) -> list[list[dict[str, Any]]]:
    """In a fresh process: prepare the case as a worker does, run nvbench once over `rounds` states,
    return the summaries of each state (in round order). Errors propagate to the parent."""
    import cuda.bench as bench
    import torch

    all_ops()  # plugins, as in a worker
    torch_device = torch.device(device.torch_device)
    index = torch_device.index or 0
    with torch.cuda.device(torch_device):
        ready = ready_case(request, device, time.perf_counter())
        if isinstance(ready, CaseOutcome):
            raise RuntimeError(f"the case did not prepare in nvbench's process: {ready.status} {ready.error or ''}")
        prepared = ready.prepared
        if CacheMode(request.case.cache) is CacheMode.HOT and prepared.sync is not None:
            raise RuntimeError("nvbench has no batch (hot) measurement for an op that synchronises itself")
        _JOB["job"] = _Job(prepared.fn, device.torch_device, prepared.sync is not None)
        bench.register(_benchmark).set_name(BENCHMARK_NAME).add_int64_axis(ROUND_AXIS, list(range(rounds)))
        with tempfile.TemporaryDirectory(prefix="rooflab-nvbench-") as tmp:
            out = Path(tmp) / "nvbench.json"
            argv = ["rooflab-crosscheck", "--quiet", "--benchmark", BENCHMARK_NAME, "--devices", str(index),
                    "--timeout", str(TIMEOUT_S), "--json", str(out)]
            try:
                bench.run_all_benchmarks(argv)
            except SystemExit as exc:  # nvbench's option parser exits on its own errors
                raise RuntimeError(f"nvbench exited with {exc.code}") from None
            return read_states(out)


def summary_seconds(summaries: list[dict[str, Any]], tag: str) -> float | None:
    """The value of summary `tag` in one nvbench JSON state, or None when absent or not a number."""
    for summary in summaries:
        if summary.get("tag") != tag:
            continue
        for item in summary.get("data", []):
            if item.get("name") == "value" and item.get("value") is not None:
                try:
                    return float(item["value"])
                except (TypeError, ValueError):
                    return None
    return None


def read_states(path: Path) -> list[list[dict[str, Any]]]:
    """The summaries of each state nvbench wrote for our benchmark, in order; a skipped state raises."""
    root = json.loads(path.read_text(encoding="utf-8"))
    for bench in root.get("benchmarks", []):
        if bench.get("name") != BENCHMARK_NAME:
            continue
        states = []
        for state in bench.get("states", []):
            if state.get("is_skipped"):
                raise RuntimeError(f"nvbench skipped the case: {state.get('skip_reason', '')}")
            states.append(list(state.get("summaries") or []))
        if states:
            return states
    raise RuntimeError(f"nvbench wrote no result for {BENCHMARK_NAME} in {path}")


def timing_from(summaries: list[dict[str, Any]], mode: CacheMode) -> PeerTiming:
    """One round's figure from its nvbench summaries: batch mean (hot) or cold median (else cold mean)."""
    if mode is CacheMode.HOT:
        mean_s = summary_seconds(summaries, "nv/batch/time/gpu/mean")
        if mean_s is None:
            raise RuntimeError("nvbench reported no batch (hot) time")
        return PeerTiming(mean_s * 1e3, (), CacheMode.HOT, PeerClock.DEVICE_BATCH_MEAN)
    median_s = summary_seconds(summaries, "nv/cold/time/gpu/median")
    if median_s is None:
        median_s = summary_seconds(summaries, "nv/cold/time/gpu/mean")
    if median_s is None:
        raise RuntimeError("nvbench reported no cold GPU time")
    return PeerTiming(median_s * 1e3, (), CacheMode.COLD, PeerClock.DEVICE_BLOCKED)


class NvbenchPeer:
    name: ClassVar[PeerName] = PeerName.NVBENCH

    def version(self) -> str | None:
        return package_version("cuda-bench")

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        if not device.is_cuda:
            return "nvbench measures GPU kernels: it needs a CUDA device"
        try:
            import cuda.bench  # noqa: F401 - imported only to see that it is installed
        except Exception as exc:  # noqa: BLE001 - any import failure means the peer is unavailable
            return f"cuda-bench (cuda.bench) is not importable: {exc}"
        return None

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        """Cold case: a memset of exactly the L2, then a synchronisation; the sample behind the blocking
        kernel; a synchronisation after it and a host gap before the next (pace idle); median.
        Hot case: launches back to back between one event pair (the batch), synchronised after it;
        the mean per launch. An op that synchronises itself turns the blocking kernel off (`sync=True`)."""
        hold = HoldMode.SYNC_PER_SAMPLE if op_syncs else HoldMode.HELD
        if CacheMode(case.cache) is CacheMode.HOT:
            return hot_mode(device, hold=HoldMode.SYNC_PER_SAMPLE, clock=Clock.DEVICE, sample=Sample.BLOCK_MEAN)
        return cold_mode(device, flush_bytes=device.l2_bytes, pace=Pace.IDLE, hold=hold)

    def time(self, fn: Call, *, case: Case, device: DeviceInfo, sync: Call | None) -> PeerTiming:
        raise RuntimeError("nvbench runs once per process: it times whole cases in a child (time_rounds)")

    def time_rounds(self, request: Any, *, device: DeviceInfo, rounds: int) -> list[PeerTiming]:
        """Every round of one case, measured in one fresh process (see the module docstring)."""
        states = run_in_own_process(run_in_child, (request, device, rounds), timeout_s=CHILD_TIMEOUT_S * rounds)
        if len(states) != rounds:
            raise RuntimeError(f"nvbench measured {len(states)} rounds, not {rounds}")
        mode = CacheMode(request.case.cache)
        return [timing_from(summaries, mode) for summaries in states]
