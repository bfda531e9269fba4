"""Roofline probes (family "probe"): kernels written to reach the ceilings, not to be typical.

BabelStream-style streams over three distinct arrays a, b, c of n elements (scalar q = 0.4),
s = element size:
  stream_copy   c = a          FLOPs 0     bytes 2·n·s
  stream_scale  b = q·c        FLOPs n     bytes 2·n·s
  stream_add    c = a + b      FLOPs n     bytes 3·n·s
  stream_triad  a = b + q·c    FLOPs 2·n   bytes 3·n·s
  stream_dot    Σ a·b          FLOPs 2·n   bytes 2·n·s (read-only; the scalar result is not counted)
  stream_fill   a = q          FLOPs 0     bytes n·s (write-only: one array of n elements, nothing read)
Each stream writes one array (n·s written; none for dot) and reads the others (BabelStream's weights
split into reads and writes: copy and scale 1 + 1, add and triad 2 + 1, dot 2 + 0, fill 0 + 1: the
write-only probe, not one of BabelStream's, is the fill of nvbench's issue 270).
Backends: eager (torch ops into preallocated outputs; torch.dot) and cupy (RawKernels of
suite.ops.cuda_sources: grid-stride loops of 256-thread blocks, dot as 1024-thread block partial
sums added by a second one-block kernel).

fma_intensity (ERT/mixbench style): y[i] = b_k with b_0 = x[i] and b_j = b_{j-1}·α + x[i]
(α = 0.5): k dependent FMAs per element loaded and one store. FLOPs 2·k·n, bytes 2·n·s, so the
arithmetic intensity is k/s FLOP/byte; sweeping k from 1 to 1024 traces the roof from the
bandwidth slope to the compute flat. Backends: cupy (a RawKernel instantiated per dtype and k;
float16/bfloat16 use packed pairs with __hfma2) and compiled (torch.compile of the unrolled chain;
the CPU path).
"""
from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.dtypes import tolerance
from rooflab.suite.lazy import torch
from rooflab.suite.ops import cuda_sources
from rooflab.suite.ops.base import Params, ParamSpec, Prepared
from rooflab.suite.ops.common import (
    TorchOp,
    as_torch,
    compare_chunked,
    cupy_skip_reason,
    esize,
    fresh_compile,
    generator,
    randn,
    require_cupy,
)
from rooflab.suite.ops.pointwise import Q, cupy_stream
from rooflab.suite.ops.registry import register

ALPHA = 0.5
MAX_FMA_K = 4096


@functools.lru_cache(maxsize=64)
def _raw_module(source: str) -> Any:
    cp = require_cupy()
    return cp.RawModule(code=source, options=("--std=c++17",))


def _acc_scalar(cp: Any, dtype: str, value: float) -> Any:
    return cp.float64(value) if dtype == "float64" else cp.float32(value)


def _grid(n: int, threads: int, device: DeviceInfo) -> int:
    """Grid-stride launch: enough blocks for 32 per SM (several waves), fewer when n is small."""
    return max(1, min(-(-n // threads), 32 * max(1, device.sm_count)))


class StreamOp(TorchOp):
    family = "probe"
    params = {"n": ParamSpec(int, 1 << 24, "elements per array")}
    backends = ("eager", "cupy")
    dtypes = ("float64", "float32", "float16", "bfloat16")
    kind: ClassVar[str]
    flops_per_element: ClassVar[int]
    arrays_read: ClassVar[int]  # arrays of n elements read (with arrays_written: BabelStream's weight)
    arrays_written: ClassVar[int] = 1  # arrays of n elements written

    def flops(self, params: Params, dtype: str) -> int:
        return self.flops_per_element * int(self.p(params)["n"])

    def bytes_read(self, params: Params, dtype: str) -> int:
        return self.arrays_read * int(self.p(params)["n"]) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        return self.arrays_written * int(self.p(params)["n"]) * esize(dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return 3 * int(self.p(params)["n"]) * esize(dtype)



class ThreeArrayStream(StreamOp):
    """copy, scale, add, triad: three arrays a, b, c, one of them written (BabelStream's layout)."""

    @abstractmethod
    def eager(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Callable[[], torch.Tensor]:
        """The torch form of one call."""

    @abstractmethod
    def reference(self, a64: torch.Tensor, b64: torch.Tensor, c64: torch.Tensor) -> torch.Tensor:
        """The written array, in float64, from float64 copies of the inputs."""

    @abstractmethod
    def cupy_launch(self, cp: Any, kernel: Any, grid: int, a: Any, b: Any, c: Any, n: Any, dtype: str) -> Any:
        """One launch of the RawKernel; returns the written array."""

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        n = int(self.p(case.params)["n"])
        gen = generator(device, seed)
        a, b, c = (randn(n, case.dtype, device, gen) for _ in range(3))
        if case.backend == "cupy":
            cp = require_cupy()
            module = _raw_module(cuda_sources.stream_source(case.dtype))
            kernel = module.get_function(cuda_sources.stream_kernel_name(self.kind, case.dtype))
            ca, cb, cc = cp.from_dlpack(a), cp.from_dlpack(b), cp.from_dlpack(c)
            grid = _grid(n, cuda_sources.STREAM_THREADS, device)
            count = cp.int64(n)

            def fn() -> Any:
                with cupy_stream(cp):
                    return self.cupy_launch(cp, kernel, grid, ca, cb, cc, count, case.dtype)

        else:
            fn = self.eager(a, b, c)
        # each stream writes one array that its reference does not read, so a, b, c can serve
        # as the reference's inputs after any number of calls

        def check(output: Any) -> str | None:
            out = as_torch(output)
            if tuple(out.shape) != (n,):
                return f"output has shape {tuple(out.shape)}, expected {(n,)}"
            return compare_chunked(
                out.reshape(-1, 1),
                lambda rows: self.reference(*(t[rows].double() for t in (a, b, c))).reshape(-1, 1),
                case.dtype,
            )

        return Prepared(fn=fn, check=check)


class StreamCopy(ThreeArrayStream):
    """c = a. FLOPs 0; bytes 2·n·s."""

    name = "stream_copy"
    kind = "copy"
    flops_per_element = 0
    arrays_read = 1

    def eager(self, a, b, c):
        return lambda: c.copy_(a)

    def reference(self, a64, b64, c64):
        return a64

    def cupy_launch(self, cp, kernel, grid, a, b, c, n, dtype):
        kernel((grid,), (cuda_sources.STREAM_THREADS,), (a, c, n))
        return c


class StreamScale(ThreeArrayStream):
    """b = q·c (q = 0.4). FLOPs n; bytes 2·n·s."""

    name = "stream_scale"
    kind = "scale"
    flops_per_element = 1
    arrays_read = 1

    def eager(self, a, b, c):
        return lambda: torch.mul(c, Q, out=b)

    def reference(self, a64, b64, c64):
        return Q * c64

    def cupy_launch(self, cp, kernel, grid, a, b, c, n, dtype):
        kernel((grid,), (cuda_sources.STREAM_THREADS,), (c, b, n, _acc_scalar(cp, dtype, Q)))
        return b


class StreamAdd(ThreeArrayStream):
    """c = a + b. FLOPs n; bytes 3·n·s."""

    name = "stream_add"
    kind = "add"
    flops_per_element = 1
    arrays_read = 2

    def eager(self, a, b, c):
        return lambda: torch.add(a, b, out=c)

    def reference(self, a64, b64, c64):
        return a64 + b64

    def cupy_launch(self, cp, kernel, grid, a, b, c, n, dtype):
        kernel((grid,), (cuda_sources.STREAM_THREADS,), (a, b, c, n))
        return c


class StreamTriad(ThreeArrayStream):
    """a = b + q·c (q = 0.4). FLOPs 2·n; bytes 3·n·s."""

    name = "stream_triad"
    kind = "triad"
    flops_per_element = 2
    arrays_read = 2

    def eager(self, a, b, c):
        return lambda: torch.add(b, c, alpha=Q, out=a)

    def reference(self, a64, b64, c64):
        return b64 + Q * c64

    def cupy_launch(self, cp, kernel, grid, a, b, c, n, dtype):
        kernel((grid,), (cuda_sources.STREAM_THREADS,), (b, c, a, n, _acc_scalar(cp, dtype, Q)))
        return a


class StreamDot(StreamOp):
    """Σ a·b. FLOPs 2·n; bytes 2·n·s (two arrays read). The result is a scalar (float32, or float64
    for float64, from the cupy kernels; the input dtype from torch.dot)."""

    name = "stream_dot"
    reads_only = True
    kind = "dot"
    flops_per_element = 2
    arrays_read = 2
    arrays_written = 0

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return 2 * int(self.p(params)["n"]) * esize(dtype) + 8 * 4096

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        n = int(self.p(case.params)["n"])
        gen = generator(device, seed)
        a = randn(n, case.dtype, device, gen)
        b = randn(n, case.dtype, device, gen)
        if case.backend == "cupy":
            cp = require_cupy()
            module = _raw_module(cuda_sources.stream_source(case.dtype))
            partial_kernel = module.get_function(cuda_sources.stream_kernel_name("dot", case.dtype))
            final_kernel = module.get_function(f"stream_dot_final_{case.dtype}")
            threads = cuda_sources.DOT_THREADS
            blocks = max(1, min(-(-n // threads), 4 * max(1, device.sm_count)))
            acc = cp.float64 if case.dtype == "float64" else cp.float32
            partial = cp.empty(blocks, dtype=acc)
            result = cp.empty(1, dtype=acc)
            ca, cb = cp.from_dlpack(a), cp.from_dlpack(b)
            count = cp.int64(n)

            def fn() -> Any:
                with cupy_stream(cp):
                    partial_kernel((blocks,), (threads,), (ca, cb, partial, count))
                    final_kernel((1,), (threads,), (partial, result, cp.int32(blocks)))
                return result

        else:
            fn = lambda: torch.dot(a, b)  # noqa: E731 - the timed callable, one line per backend

        def check(output: Any) -> str | None:
            got = as_torch(output).reshape(())
            ref = torch.zeros((), dtype=torch.float64, device=a.device)
            step = 1 << 22
            for start in range(0, n, step):
                ref += torch.dot(a[start : start + step].double(), b[start : start + step].double())
            return _compare_scalar(got, ref, a, b, case.dtype, n)

        return Prepared(fn=fn, check=check)


class StreamFill(StreamOp):
    """a = q (q = 0.4): writes one array, reads nothing. FLOPs 0; bytes n·s, all written."""

    name = "stream_fill"
    kind = "fill"
    flops_per_element = 0
    arrays_read = 0

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return int(self.p(params)["n"]) * esize(dtype)

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        n = int(self.p(case.params)["n"])
        a = randn(n, case.dtype, device, generator(device, seed))  # random before the first call: it must fill
        if case.backend == "cupy":
            cp = require_cupy()
            kernel = _raw_module(cuda_sources.stream_source(case.dtype)).get_function(
                cuda_sources.stream_kernel_name("fill", case.dtype))
            ca, grid, count = cp.from_dlpack(a), _grid(n, cuda_sources.STREAM_THREADS, device), cp.int64(n)

            def fn() -> Any:
                with cupy_stream(cp):
                    kernel((grid,), (cuda_sources.STREAM_THREADS,), (ca, count, _acc_scalar(cp, case.dtype, Q)))
                return ca

        else:
            fn = lambda: a.fill_(Q)  # noqa: E731 - the timed callable, one line per backend

        def check(output: Any) -> str | None:
            out = as_torch(output)
            if tuple(out.shape) != (n,):
                return f"output has shape {tuple(out.shape)}, expected {(n,)}"
            return compare_chunked(out.reshape(-1, 1),
                                   lambda rows: torch.full_like(out[rows], Q, dtype=torch.float64).reshape(-1, 1),
                                   case.dtype)

        return Prepared(fn=fn, check=check)


def _compare_scalar(got: torch.Tensor, ref: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: str,
                    n: int) -> str | None:
    """A dot product's error scales with Σ|a·b| (its condition), not with |Σ a·b|, so the scale
    given to the tolerance is sqrt(Σ (a·b)²), the RMS-like size of the terms' random walk."""
    if not bool(torch.isfinite(got)):
        return f"dot result is not finite: {float(got)}"
    spread = torch.zeros((), dtype=torch.float64, device=a.device)
    step = 1 << 22
    for start in range(0, n, step):
        spread += (a[start : start + step].double() * b[start : start + step].double()).square().sum()
    scale = float(spread.sqrt())
    tol = tolerance(dtype, n)
    err = abs(float(got) - float(ref))
    # output rounding relative to the result, accumulation error relative to the terms
    limit = (tol.atol_scale - tol.rtol) * scale + tol.rtol * abs(float(ref))
    if err > limit:
        return (
            f"dot result {float(got):.8g}, expected {float(ref):.8g}: abs error {err:.4g} exceeds "
            f"{limit:.4g} ({dtype}, {n} terms)"
        )
    return None


def _fma_chain(x: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    b = x
    for _ in range(k):
        b = b * alpha + x
    return b


def fma_chain_factor(k: int, alpha: float = ALPHA) -> float:
    """c_k with y = c_k·x: c_0 = 1, c_j = α·c_{j-1} + 1 (the chain is linear in x)."""
    c = 1.0
    for _ in range(k):
        c = alpha * c + 1.0
    return c


class FmaIntensity(TorchOp):
    """See the module docstring. FLOPs 2·k·n; bytes 2·n·s."""

    name = "fma_intensity"
    family = "probe"
    params = {
        "n": ParamSpec(int, 1 << 22, "elements loaded (and stored)"),
        "k": ParamSpec(int, 64, f"dependent FMAs per element, 1 to {MAX_FMA_K}"),
    }
    backends = ("cupy", "compiled")
    dtypes = cuda_sources.FMA_DTYPES

    def flops(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        return 2 * int(p["k"]) * int(p["n"])

    def bytes_read(self, params: Params, dtype: str) -> int:
        """x, n elements."""
        return int(self.p(params)["n"]) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        """y, n elements."""
        return int(self.p(params)["n"]) * esize(dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return self.bytes(params, dtype)

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        k = int(self.p(case.params)["k"])
        if not 1 <= k <= MAX_FMA_K:
            return f"k must be between 1 and {MAX_FMA_K}, got {k}"
        if case.backend == "cupy" and case.dtype == "bfloat16":
            cc = device.compute_capability
            if cc is not None and tuple(cc) < (8, 0):
                return f"bfloat16 FMAs need compute capability >= 8.0 (device has {cc})"
        return None

    def cupy_skip(self, case: Case, device: DeviceInfo) -> str | None:
        # the kernel takes raw pointers, so CuPy's lack of bfloat16 arrays does not matter here
        return cupy_skip_reason(device, "float16" if case.dtype == "bfloat16" else case.dtype)

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        p = self.p(case.params)
        n, k = int(p["n"]), int(p["k"])
        gen = generator(device, seed)
        x = randn(n, case.dtype, device, gen)
        y = torch.empty_like(x)
        if case.backend == "cupy":
            cp = require_cupy()
            module = _raw_module(cuda_sources.fma_source(case.dtype, k))
            kernel = module.get_function(cuda_sources.fma_kernel_name(case.dtype, k))
            # raw device pointers: CuPy has no bfloat16 arrays, the kernel needs none
            px, py = x.data_ptr(), y.data_ptr()
            paired = cuda_sources.CTYPES[case.dtype].vec2 is not None
            work = -(-n // 2) if paired else n
            grid = _grid(work, cuda_sources.FMA_THREADS, device)
            alpha = cp.float32(ALPHA) if case.dtype != "float64" else cp.float64(ALPHA)
            count = cp.int64(n)

            def fn() -> torch.Tensor:
                with cupy_stream(cp):
                    kernel((grid,), (cuda_sources.FMA_THREADS,), (cp.uint64(px), cp.uint64(py), count, alpha))
                return y

        elif case.backend == "compiled":
            compiled = fresh_compile(_fma_chain)
            fn = lambda: compiled(x, k, ALPHA)  # noqa: E731 - the timed callable, one line per backend
        else:
            raise ValueError(f"op fma_intensity has no backend {case.backend!r}")
        factor = fma_chain_factor(k)

        def check(output: Any) -> str | None:
            out = as_torch(output)
            if tuple(out.shape) != (n,):
                return f"output has shape {tuple(out.shape)}, expected {(n,)}"
            return compare_chunked(out.reshape(-1, 1), lambda rows: (x[rows].double() * factor).reshape(-1, 1),
                                   case.dtype)

        return Prepared(fn=fn, check=check)


for _op in (StreamCopy, StreamScale, StreamAdd, StreamTriad, StreamDot, StreamFill, FmaIntensity):
    register(_op)
