"""Launch overhead: the smallest useful kernel, y = x + 1 on n (default 1) elements.

In timing mode `launch` a sample is one launch from Python (the launch floor a user sees); in
`graph` mode the runner replays a CUDA graph of back-to-back launches, which leaves the GPU-side
cost of one kernel. FLOPs n; bytes 2·n·s.

Backends: eager (torch.add into a preallocated output) and cupy (a RawKernel of one block).
"""
from __future__ import annotations

from typing import Any

import torch

from suite.case import Case
from suite.device import DeviceInfo
from suite.ops import cuda_sources
from suite.ops.base import ParamSpec, Params, Prepared
from suite.ops.common import TorchOp, as_torch, compare, cupy_module, esize, generator, randn
from suite.ops.pointwise import cupy_stream
from suite.ops.registry import register

MAX_N = 1 << 16


class Launch(TorchOp):
    """See the module docstring."""

    name = "launch"
    family = "overhead"
    params = {"n": ParamSpec(int, 1, f"elements (tiny: at most {MAX_N})")}
    backends = ("eager", "cupy")
    dtypes = ("float32", "float16", "float64")
    timing_modes = ("launch", "graph")

    def flops(self, params: Params, dtype: str) -> int:
        return int(self.p(params)["n"])

    def bytes(self, params: Params, dtype: str) -> int:
        return 2 * int(self.p(params)["n"]) * esize(dtype)

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
            cp = cupy_module()
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
            fn = lambda: torch.add(x, 1, out=y)  # noqa: E731

        def check(output: Any) -> str | None:
            return compare(as_torch(output), x.double() + 1.0, case.dtype)

        return Prepared(fn=fn, check=check)


register(Launch)
