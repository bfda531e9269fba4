"""CUDA graph capture of back-to-back launches, for the `graph` timing mode.

A graph holding N launches of `fn` is replayed as one unit; its event time divided by N is the
time of one launch without the host's per-launch overhead. As torch requires, `fn` is first run a
few times on a side stream, then captured. N is `graph_launches` when set, else chosen so that one
replay lasts about TARGET_REPLAY_MS: from an eager estimate first, then corrected once from the
time of a replay of the first graph (the eager estimate includes launch overhead, so it is high
for small kernels).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads when a graph is first captured
    import torch

TARGET_REPLAY_MS = 1.0
MAX_GRAPH_LAUNCHES = 4096
SIDE_STREAM_WARMUP_CALLS = 3


class GraphCaptureError(RuntimeError):
    """`fn` could not be captured into a CUDA graph (it synchronises, allocates on the host, ...)."""


def launches_for(per_launch_ms: float, *, target_ms: float = TARGET_REPLAY_MS) -> int:
    """Launches per graph so that one replay lasts about `target_ms` (1 .. MAX_GRAPH_LAUNCHES)."""
    if not per_launch_ms > 0:
        return MAX_GRAPH_LAUNCHES
    return max(1, min(MAX_GRAPH_LAUNCHES, math.ceil(target_ms / per_launch_ms)))


def warm_on_side_stream(fn: Callable[[], object], torch_device: str) -> None:
    """Run `fn` a few times on a side stream, joined back to the current stream (torch's recipe)."""
    import torch

    device = torch.device(torch_device)
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(SIDE_STREAM_WARMUP_CALLS):
            fn()
    current.wait_stream(side)
    torch.cuda.synchronize(device)


def capture(fn: Callable[[], object], launches: int, torch_device: str) -> torch.cuda.CUDAGraph:
    """A `torch.cuda.CUDAGraph` holding `launches` back-to-back calls of `fn`."""
    import torch

    device = torch.device(torch_device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(launches):
                fn()  # outputs are dropped at once, so the graph's pool reuses their memory
    except Exception as exc:  # torch raises RuntimeError subclasses from the CUDA API
        raise GraphCaptureError(f"CUDA graph capture failed: {exc}") from exc
    torch.cuda.synchronize(device)
    return graph
