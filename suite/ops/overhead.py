"""Launch overhead: the smallest useful kernel, y = x + 1 on n (default 1) elements.

This op measures what a user pays per launch, not a kernel's duration (`sample_kind`
host_per_launch): a sample is the host's wall time of back-to-back launches with one device
synchronisation at the end, divided by the launches. In timing mode `launch` they are eager calls
from Python (the launch floor a user sees); in `graph` mode they are the launches of one replay of
a CUDA graph (the per-launch cost of graph replay). Nothing is flushed between back-to-back
launches, so the op runs in cache mode hot only. FLOPs n; bytes 2·n·s.

Backends: eager (torch.add into a preallocated output) and cupy (a RawKernel of one block).
"""
from __future__ import annotations

from typing import Any

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.lazy import torch
from rooflab.suite.ops import cuda_sources
from rooflab.suite.ops.base import Params, ParamSpec, Prepared
from rooflab.suite.ops.common import TorchOp, as_torch, compare, esize, generator, randn, require_cupy
from rooflab.suite.ops.pointwise import cupy_stream
from rooflab.suite.ops.registry import register
from rooflab.vocab import TIMING_MODES, CacheMode, SampleKind

MAX_N = 1 << 16


class Launch(TorchOp):
    """See the module docstring."""

    name = "launch"
    family = "overhead"
    params = {"n": ParamSpec(int, 1, f"elements (tiny: at most {MAX_N})")}
    backends = ("eager", "cupy")
    dtypes = ("float32", "float16", "float64")
    timing_modes = TIMING_MODES
    cache_modes = (CacheMode.HOT,)
    sample_kind = SampleKind.HOST_PER_LAUNCH
    version = 2  # v1 reported a kernel's event time, v2 the host time per launch

    def flops(self, params: Params, dtype: str) -> int:
        return int(self.p(params)["n"])

    def bytes_read(self, params: Params, dtype: str) -> int:
        """x, n elements."""
        return int(self.p(params)["n"]) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        """y, n elements."""
        return int(self.p(params)["n"]) * esize(dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return self.bytes(params, dtype)

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        n = int(self.p(case.params)["n"])
        if n > MAX_N:
            return f"launch measures overhead: n must be at most {MAX_N}, got {n}"
        return None

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        n = int(self.p(case.params)["n"])
        gen = generator(device, seed)
        x = randn(n, case.dtype, device, gen)
        y = torch.empty_like(x)
        if case.backend == "cupy":
            cp = require_cupy()
            module = cp.RawModule(code=cuda_sources.launch_source(case.dtype), options=("--std=c++17",))
            kernel = module.get_function(cuda_sources.launch_kernel_name(case.dtype))
            cx, cy = cp.from_dlpack(x), cp.from_dlpack(y)
            threads = min(n, 1024)
            blocks = -(-n // threads)
            count = cp.int64(n)

            def fn() -> Any:
                with cupy_stream(cp):
                    kernel((blocks,), (threads,), (cx, cy, count))
                return cy

        else:
            fn = lambda: torch.add(x, 1, out=y)  # noqa: E731 - the timed callable, one line per backend

        def check(output: Any) -> str | None:
            return compare(as_torch(output), x.double() + 1.0, case.dtype)

        return Prepared(fn=fn, check=check)


register(Launch)
