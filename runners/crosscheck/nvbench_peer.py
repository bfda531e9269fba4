"""The `nvbench` peer: NVIDIA's nvbench through its Python package `cuda-bench` (`cuda.bench`).

One benchmark is registered once per process; each time it runs, it launches the callable that
`time` put in `_JOB` on the stream nvbench hands over (`launch.get_stream()`, wrapped as a torch
external stream, so torch and rooflab's CuPy ops, which follow torch's current stream, enqueue
there). nvbench's results come back through its JSON output (`--json FILE`), whose summaries hold
seconds:
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rooflab.runners.crosscheck.peer import CacheMode, Call, PeerClock, PeerName, PeerTiming, package_version
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo

BENCHMARK_NAME = "rooflab_crosscheck"
TIMEOUT_S = 15.0  # nvbench's default per measurement


@dataclass
class _Job:
    fn: Call
    torch_device: str
    sync: bool


_JOB: dict[str, _Job] = {}
_REGISTERED: list[bool] = []


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


def read_state(path: Path) -> list[dict[str, Any]]:
    """The summaries of the single state nvbench wrote for our benchmark."""
    root = json.loads(path.read_text(encoding="utf-8"))
    for bench in root.get("benchmarks", []):
        if bench.get("name") != BENCHMARK_NAME:
            continue
        for state in bench.get("states", []):
            if not state.get("is_skipped"):
                return list(state.get("summaries") or [])
            raise RuntimeError(f"nvbench skipped the case: {state.get('skip_reason', '')}")
    raise RuntimeError(f"nvbench wrote no result for {BENCHMARK_NAME} in {path}")


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

    def cache_for(self, case: Case) -> CacheMode:
        return CacheMode(case.cache)

    def time(self, fn: Call, *, case: Case, device: DeviceInfo, sync: Call | None) -> PeerTiming:
        import cuda.bench as bench
        import torch

        mode = self.cache_for(case)
        if mode is CacheMode.HOT and sync is not None:
            raise RuntimeError("nvbench has no batch (hot) measurement for an op that synchronises itself")
        if not _REGISTERED:
            bench.register(_benchmark).set_name(BENCHMARK_NAME)
            _REGISTERED.append(True)
        index = torch.device(device.torch_device).index or 0
        _JOB["job"] = _Job(fn, device.torch_device, sync is not None)
        try:
            with tempfile.TemporaryDirectory(prefix="rooflab-nvbench-") as tmp:
                out = Path(tmp) / "nvbench.json"
                argv = ["rooflab-crosscheck", "--quiet", "--benchmark", BENCHMARK_NAME, "--devices", str(index),
                        "--timeout", str(TIMEOUT_S), "--json", str(out)]
                try:
                    bench.run_all_benchmarks(argv)
                except SystemExit as exc:  # nvbench's option parser exits on its own errors
                    raise RuntimeError(f"nvbench exited with {exc.code}") from None
                summaries = read_state(out)
        finally:
            _JOB.pop("job", None)
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
