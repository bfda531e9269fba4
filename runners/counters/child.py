"""The profiled process: `python -m rooflab.runners.counters.child REQUEST`, run under ncu.

It prepares the case of REQUEST exactly as a worker does (pin the device, capture it, load the ops
and plugins, then runners.orchestration.prepare.ready_case: skip checks, inputs from the same seed,
first call, float64 check), then makes ONE call of the timed callable inside the NVTX range that
ncu's `--nvtx-include` selects, waits for it, and exits. Everything before the range (compilation,
autotuning, the first call, the check) is left out of what ncu profiles.

With `sweep_bytes` set (the write-back pass, runners.counters.writeback) it sweeps the cache before
the range, and inside it follows the call with two read sweeps of that many bytes.

What became of the case goes to the request's result file as JSON: {"status", "error",
"first_call_ms"}; status is ok, skipped, incorrect or failed (an exception, with its message). On
a CPU device (only in tests, where a fake ncu runs this) there is no NVTX range to open: NVTX marks
CUDA work, and a CPU build of torch has none.
"""
from __future__ import annotations

import contextlib
import json
import pickle
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rooflab.runners.counters.ncu import RANGE
from rooflab.runners.engine.flush import make_flusher
from rooflab.runners.machine.environment import capture
from rooflab.runners.orchestration import prepare as preparing
from rooflab.runners.orchestration.messages import CaseOutcome
from rooflab.runners.orchestration.worker import _pin, describe_exception
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import Prepared
from rooflab.suite.ops.registry import all_ops
from rooflab.vocab import CacheMode, FlushMethod, ResultStatus


@dataclass(frozen=True)
class ChildRequest:
    case_request: Any  # runners.orchestration.messages.CaseRequest
    torch_device: str  # "cuda:0"
    result_path: str
    # the write-back pass (runners.counters.writeback): the sweep's buffer in bytes; None: the profiling pass
    sweep_bytes: int | None = None


def write_request(request: ChildRequest, path: Path) -> Path:
    path.write_bytes(pickle.dumps(request))
    return path


@contextlib.contextmanager
def nvtx_range(name: str, on_cuda: bool) -> Iterator[None]:
    """A push/pop NVTX range around the block (what `--nvtx-include NAME/` selects); none on a CPU."""
    if not on_cuda:
        yield
        return
    import torch

    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


def profile_one_call(request: ChildRequest) -> dict[str, Any]:
    """Prepare as a worker does, then one call inside the range; the result file's content."""
    _pin(request.torch_device)
    _environment, device = capture(request.torch_device)
    all_ops()  # plugins (ROOFLAB_PLUGINS), as in a worker
    ready = preparing.ready_case(request.case_request, device, time.perf_counter())
    if isinstance(ready, CaseOutcome):
        first_call_ms = ready.method.first_call_ms if ready.method is not None else None
        return {"status": str(ready.status), "error": ready.error, "first_call_ms": first_call_ms}
    prepared = ready.prepared
    preparing.synchronize(device, prepared.sync)
    if request.sweep_bytes is None:
        with nvtx_range(RANGE, device.is_cuda):
            prepared.fn()
            preparing.synchronize(device, prepared.sync)
    else:
        hot = request.case_request.case.cache == CacheMode.HOT
        sweep_around_one_call(prepared, device, request.sweep_bytes, hot=hot)
    return {"status": str(ResultStatus.OK), "error": None, "first_call_ms": ready.first_call_ms}


def sweep_around_one_call(prepared: Prepared, device: DeviceInfo, sweep_bytes: int, *, hot: bool) -> None:
    """The write-back pass's call (runners.counters.writeback): a read sweep that cleans the cache, one
    more call for a hot case, then inside the range the call and two sweeps."""
    sweep = make_flusher(device, FlushMethod.READ_SWEEP, sweep_bytes)  # sweeps once as it is made
    preparing.synchronize(device, prepared.sync)
    if hot:
        prepared.fn()
        preparing.synchronize(device, prepared.sync)
    with nvtx_range(RANGE, device.is_cuda):
        prepared.fn()
        preparing.synchronize(device, prepared.sync)
        sweep.flush()  # evicts the call's dirty lines: their write-back is counted here
        sweep.flush()  # nothing of the call left: what a sweep writes on its own
        preparing.synchronize(device, None)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m rooflab.runners.counters.child REQUEST", file=sys.stderr)
        return 2
    request: ChildRequest = pickle.loads(Path(argv[0]).read_bytes())  # noqa: S301 - written by this process's parent
    try:
        result = profile_one_call(request)
    except Exception as exc:  # noqa: BLE001 - an exception in a case is data: status failed
        result = {"status": str(ResultStatus.FAILED), "error": describe_exception(exc), "first_call_ms": None}
    Path(request.result_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
