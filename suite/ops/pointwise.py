"""Pointwise ops over arrays of n elements.

(Over 400 lines on purpose: the family's dozen ops, each a short class with its model, its inputs
and its reference, read best side by side; a module per op would scatter one table.)

FLOPs and bytes (s = element size): copy 0 and 2·n·s; scale n and 2·n·s; add n and 3·n·s;
triad 2·n and 3·n·s (the reference table of docs/design.md). Every op here writes one array of n
elements (n·s written) and reads its inputs (n·s each: one for copy and scale, two for add and
triad). Ops outside the table state their count below; an
elementary function (erf, cos) counts as one FLOP.

Backends: eager runs torch ops writing into preallocated outputs where torch offers `out=`;
compiled runs torch.compile of the pure function (which allocates its output, as user code
does); cupy runs an ElementwiseKernel on the same memory (shared with torch through DLPack) on
torch's current stream, so CUDA events and graph capture see it.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.dtypes import tolerance
from rooflab.suite.lazy import F, torch
from rooflab.suite.ops.base import Params, ParamSpec, Prepared
from rooflab.suite.ops.common import (
    CHECK_CHUNK_ELEMENTS,
    COMPILE_MODE_PARAM,
    TorchOp,
    as_torch,
    compare,
    compare_chunked,
    cupy_module,
    esize,
    fresh_compile,
    generator,
    randn,
)
from rooflab.suite.ops.registry import register
from rooflab.vocab import ElementaryFunction

Q = 0.4  # the scalar of scale and triad (BabelStream's startScalar)
N_PARAM = {"n": ParamSpec(int, 1 << 20, "elements per array"), "compile_mode": COMPILE_MODE_PARAM}


def _ctype(dtype: str) -> str:
    return "double" if dtype == "float64" else "float"


_external_streams: dict[int, Any] = {}


def cupy_stream(cp: Any) -> Any:
    """CuPy's view of torch's current CUDA stream (enter it around CuPy launches), so that torch's
    CUDA events time the CuPy work and CUDA-graph capture records it."""
    handle = torch.cuda.current_stream().cuda_stream
    stream = _external_streams.get(handle)
    if stream is None:
        stream = _external_streams[handle] = external_stream(cp, handle)
    return stream


class _StreamHandle:
    """A raw CUDA stream handle behind the CUDA stream protocol (`__cuda_stream__` -> (version 0,
    address)), which CuPy 14's `Stream.from_external` takes: it refuses a bare int."""

    def __init__(self, handle: int) -> None:
        self.handle = int(handle)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def external_stream(cp: Any, handle: int) -> Any:
    """A CuPy stream object over an existing CUDA stream: `cupy.cuda.Stream.from_external`
    (CuPy 14, which deprecates ExternalStream) given the handle through the stream protocol, else
    `cupy.cuda.ExternalStream` (older CuPy). The one place CuPy is handed torch's stream."""
    from_external = getattr(cp.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamHandle(handle))
    return cp.cuda.ExternalStream(handle)


class PointwiseOp(TorchOp):
    """An elementwise op y = f(inputs) on 1-D arrays of n elements."""

    family = "pointwise"
    params = N_PARAM
    backends: ClassVar[tuple[str, ...]] = ("eager", "compiled", "cupy")
    dtypes: ClassVar[tuple[str, ...]] = ("float64", "float32", "float16", "bfloat16")
    n_inputs: ClassVar[int] = 1
    flops_per_element: ClassVar[int] = 0
    eager_temporaries: ClassVar[int] = 0  # extra arrays of n elements the eager form writes
    # elementary functions per element (each is also one of flops_per_element)
    elementary_per_element: ClassVar[dict[ElementaryFunction, int]] = {}
    # ElementwiseKernel of the cupy backend: (in params, out params, body with {C} = compute type)
    cupy_kernel: ClassVar[tuple[str, str, str] | None] = None

    def flops(self, params: Params, dtype: str) -> int:
        return self.flops_per_element * int(self.p(params)["n"])

    def elementary(self, params: Params, dtype: str) -> dict[ElementaryFunction, int]:
        n = int(self.p(params)["n"])
        return {f: per * n for f, per in self.elementary_per_element.items()}

    def bytes_read(self, params: Params, dtype: str) -> int:
        """Each of the n_inputs arrays of n elements, once."""
        return self.n_inputs * int(self.p(params)["n"]) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        """The output array of n elements, once."""
        return int(self.p(params)["n"]) * esize(dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return (self.n_inputs + 1 + self.eager_temporaries) * int(self.p(params)["n"]) * esize(dtype)

    # the pure function (compiled backend; each op defines it as a staticmethod), its eager form,
    # and the float64 reference
    function: ClassVar[Callable[..., torch.Tensor]]

    def eager(self, xs: tuple[torch.Tensor, ...], out: torch.Tensor) -> Callable[[], torch.Tensor]:
        fn = self.function
        return lambda: fn(*xs)

    def reference(self, *xs64: torch.Tensor) -> torch.Tensor:
        return self.function(*xs64)

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        n = int(self.p(case.params)["n"])
        gen = generator(device, seed)
        xs = tuple(randn(n, case.dtype, device, gen) for _ in range(self.n_inputs))
        out = torch.empty_like(xs[0])
        if case.backend == "eager":
            fn = self.eager(xs, out)
        elif case.backend == "compiled":
            compiled = fresh_compile(self.function, str(self.p(case.params)["compile_mode"]))
            fn = lambda: compiled(*xs)  # noqa: E731 - the timed callable, one line per backend
        elif case.backend == "cupy":
            fn = self._cupy_fn(xs, out, case.dtype)
        else:
            raise ValueError(f"op {self.name} has no backend {case.backend!r}")

        def check(output: Any) -> str | None:
            got = as_torch(output)
            if tuple(got.shape) != (n,):
                return f"output has shape {tuple(got.shape)}, expected {(n,)}"
            return compare_chunked(
                got.reshape(-1, 1),
                lambda rows: self.reference(*(x[rows].double() for x in xs)).reshape(-1, 1),
                case.dtype,
            )

        return Prepared(fn=fn, check=check)

    def _cupy_fn(self, xs: tuple[torch.Tensor, ...], out: torch.Tensor, dtype: str) -> Callable[[], Any]:
        cp = cupy_module()
        if cp is None or self.cupy_kernel is None:
            raise RuntimeError(f"op {self.name}: cupy backend unavailable")
        in_params, out_params, body = self.cupy_kernel
        kernel = cp.ElementwiseKernel(
            in_params, out_params, body.format(C=_ctype(dtype)), f"rooflab_{self.name}_{dtype}"
        )
        cxs = [cp.from_dlpack(x) for x in xs]
        cout = cp.from_dlpack(out)

        def fn() -> Any:
            with cupy_stream(cp):
                kernel(*cxs, cout)
            return cout

        return fn


class Copy(PointwiseOp):
    """b = a. FLOPs 0; bytes 2·n·s."""

    name = "copy"
    n_inputs = 1
    flops_per_element = 0
    cupy_kernel = ("T a", "T b", "b = a")

    @staticmethod
    def function(a: torch.Tensor) -> torch.Tensor:
        return a.clone()

    def eager(self, xs, out):
        (a,) = xs
        return lambda: out.copy_(a)


class Scale(PointwiseOp):
    """b = q·a with q = 0.4. FLOPs n; bytes 2·n·s."""

    name = "scale"
    n_inputs = 1
    flops_per_element = 1
    cupy_kernel = ("T a", "T b", "b = (T)(({C})0.4 * ({C})a)")

    @staticmethod
    def function(a: torch.Tensor) -> torch.Tensor:
        return a * Q

    def eager(self, xs, out):
        (a,) = xs
        return lambda: torch.mul(a, Q, out=out)


class Add(PointwiseOp):
    """c = a + b. FLOPs n; bytes 3·n·s."""

    name = "add"
    n_inputs = 2
    flops_per_element = 1
    cupy_kernel = ("T a, T b", "T c", "c = (T)(({C})a + ({C})b)")

    @staticmethod
    def function(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    def eager(self, xs, out):
        a, b = xs
        return lambda: torch.add(a, b, out=out)


class Triad(PointwiseOp):
    """a = b + q·c with q = 0.4. FLOPs 2·n; bytes 3·n·s."""

    name = "triad"
    n_inputs = 2
    flops_per_element = 2
    cupy_kernel = ("T b, T c", "T a", "a = (T)(({C})b + ({C})0.4 * ({C})c)")

    @staticmethod
    def function(b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return b + Q * c

    def eager(self, xs, out):
        b, c = xs
        return lambda: torch.add(b, c, alpha=Q, out=out)


class Gelu(PointwiseOp):
    """y = gelu(x) = 0.5·x·(1 + erf(x/√2)) (exact form). FLOPs 5·n (scale, erf, add, two
    multiplies; erf counts as one); bytes 2·n·s."""

    name = "gelu"
    n_inputs = 1
    flops_per_element = 5
    elementary_per_element = {ElementaryFunction.ERF: 1}
    cupy_kernel = ("T x", "T y",
                   "{C} v = ({C})x; y = (T)(({C})0.5 * v * (({C})1 + erf(v * ({C})0.70710678118654752440)))")

    @staticmethod
    def function(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)

    def eager(self, xs, out):
        (x,) = xs
        return lambda: torch.ops.aten.gelu.out(x, out=out)

    def reference(self, *xs64: torch.Tensor) -> torch.Tensor:
        (x64,) = xs64  # the base signature takes any number of inputs; gelu has one
        return 0.5 * x64 * (1.0 + torch.erf(x64 / math.sqrt(2.0)))


class CosCos(PointwiseOp):
    """y = cos(cos(x)), a fusion chain. FLOPs 2·n (cos counts as one); bytes 2·n·s (the minimum:
    the eager form also writes and reads an intermediate of n elements, which fusion removes)."""

    name = "cos_cos"
    fusion_chain = True
    n_inputs = 1
    flops_per_element = 2
    elementary_per_element = {ElementaryFunction.COS: 2}
    eager_temporaries = 1
    cupy_kernel = ("T x", "T y", "y = (T)cos(cos(({C})x))")

    def unfused_bytes(self, params: Params, dtype: str) -> int:
        """Two cos kernels, each reads and writes n elements: 4·n·s."""
        return 4 * int(self.p(params)["n"]) * esize(dtype)

    @staticmethod
    def function(x: torch.Tensor) -> torch.Tensor:
        return x.cos().cos()

    def eager(self, xs, out):
        (x,) = xs
        tmp = torch.empty_like(x)

        def fn() -> torch.Tensor:
            torch.cos(x, out=tmp)
            return torch.cos(tmp, out=out)

        return fn


def _bias_gelu_dropout_residual(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, p: float) -> torch.Tensor:
    return residual + F.dropout(F.gelu(x + bias), p=p, training=True)


class BiasGeluDropoutResidual(TorchOp):
    """out = residual + dropout(gelu(x + bias), p), x and residual of shape [n / hidden, hidden],
    bias of shape [hidden] (a transformer MLP epilogue; the fusion chain torch.compile targets).

    FLOPs 8·n: bias add 1, gelu 5 (as op gelu), dropout scale 1, residual add 1 (random numbers
    and the keep test are not counted). Bytes (3·n + hidden)·s: x, residual and the bias read
    once ((2·n + hidden)·s), out written once (n·s). The check accepts each element either as
    dropped (out = residual) or as kept (out = residual + gelu(x + bias)/(1 - p)), and the dropped
    fraction must be within 6 standard deviations of p. It works through CHECK_CHUNK_ELEMENTS
    elements at a time, and its float64 temporaries for one chunk are part of the memory estimate."""

    name = "bias_gelu_dropout_residual"
    family = "pointwise"
    fusion_chain = True
    params = {
        "n": ParamSpec(int, 1 << 20, "elements of x (a multiple of hidden)"),
        "hidden": ParamSpec(int, 1024, "length of the bias (the last dimension)"),
        "p": ParamSpec(float, 0.1, "dropout probability, in (0, 1)"),
        "compile_mode": COMPILE_MODE_PARAM,
    }
    backends = ("eager", "compiled")
    dtypes = ("float32", "float16", "bfloat16")

    def flops(self, params: Params, dtype: str) -> int:
        return 8 * int(self.p(params)["n"])

    def elementary(self, params: Params, dtype: str) -> dict[ElementaryFunction, int]:
        """One erf per element (the gelu)."""
        return {ElementaryFunction.ERF: int(self.p(params)["n"])}

    def bytes_read(self, params: Params, dtype: str) -> int:
        """x and residual (n each) and the bias (hidden)."""
        p = self.p(params)
        return (2 * int(p["n"]) + int(p["hidden"])) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        """out (n)."""
        return int(self.p(params)["n"]) * esize(dtype)

    def unfused_bytes(self, params: Params, dtype: str) -> int:
        """x + bias (2n + hidden), gelu (2n), dropout (2n, plus a 1-byte mask of n), + residual (3n):
        (9n + hidden)·s + n."""
        p = self.p(params)
        n, hidden = int(p["n"]), int(p["hidden"])
        return (9 * n + hidden) * esize(dtype) + n

    def memory_bytes(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        n, hidden = int(p["n"]), int(p["hidden"])
        # x, residual, out, bias, and eager temporaries: x + bias, gelu, dropout (+ a byte mask)
        case_bytes = (6 * n + hidden) * esize(dtype) + n
        return case_bytes + self.check_bytes(n, hidden)

    @staticmethod
    def check_rows(n: int, hidden: int) -> int:
        """Rows of x the check takes at once: CHECK_CHUNK_ELEMENTS elements, at least one row."""
        return max(1, min(n // hidden, CHECK_CHUNK_ELEMENTS // hidden))

    @classmethod
    def check_bytes(cls, n: int, hidden: int) -> int:
        """Peak float64 temporaries of the check for one chunk of rows: CHECK_FLOAT64_ARRAYS arrays
        of the chunk (residual, x + bias, erf, kept, out, both errors, the matched reference, and
        compare()'s copies, error and limit) plus the boolean masks."""
        chunk = cls.check_rows(n, hidden) * hidden
        return chunk * (CHECK_FLOAT64_ARRAYS * 8 + 3)

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        p = self.p(case.params)
        if int(p["n"]) % int(p["hidden"]):
            return f"n ({p['n']}) must be a multiple of hidden ({p['hidden']})"
        if not 0.0 < float(p["p"]) < 1.0:
            return f"p must be in (0, 1), got {p['p']}"
        return None

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        p = self.p(case.params)
        n, hidden, prob = int(p["n"]), int(p["hidden"]), float(p["p"])
        gen = generator(device, seed)
        x = randn((n // hidden, hidden), case.dtype, device, gen)
        bias = randn(hidden, case.dtype, device, gen)
        residual = randn((n // hidden, hidden), case.dtype, device, gen)
        if case.backend == "compiled":
            compiled = fresh_compile(_bias_gelu_dropout_residual, str(p["compile_mode"]))
            fn = lambda: compiled(x, bias, residual, prob)  # noqa: E731 - the timed callable, one line per backend
        else:
            fn = lambda: _bias_gelu_dropout_residual(x, bias, residual, prob)  # noqa: E731 - the timed callable, one line per backend

        rows_per_chunk = self.check_rows(n, hidden)

        def check(output: Any) -> str | None:
            out = as_torch(output)
            if tuple(out.shape) != tuple(x.shape):
                return f"output has shape {tuple(out.shape)}, expected {tuple(x.shape)}"
            clear_total = dropped_total = 0
            for start in range(0, x.shape[0], rows_per_chunk):
                rows = slice(start, min(x.shape[0], start + rows_per_chunk))
                message, clear, dropped = _check_dropout_chunk(out[rows], x[rows], bias, residual[rows], prob,
                                                               case.dtype)
                if message:
                    return message if rows_per_chunk >= x.shape[0] else f"{message} (rows {start}..{rows.stop - 1})"
                clear_total += clear
                dropped_total += dropped
            # elements where dropping and keeping give clearly different values decide the rate
            m, d = clear_total, dropped_total
            if m >= 100:
                sigma = math.sqrt(m * prob * (1.0 - prob))
                if abs(d - m * prob) > 6.0 * sigma + 1.0:
                    return f"dropped fraction {d / m:.4f} of {m} elements is not consistent with p = {prob}"
            return None

        return Prepared(fn=fn, check=check)


CHECK_FLOAT64_ARRAYS = 12  # float64 arrays of one chunk alive at once in the dropout check (at most)


def _check_dropout_chunk(
    out: torch.Tensor, x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, prob: float, dtype: str
) -> tuple[str | None, int, int]:
    """Check one chunk of rows of bias_gelu_dropout_residual: each element matched to dropped
    (out = residual) or kept (out = residual + gelu(x + bias)/(1 - p)); (message, elements where
    the two differ clearly, of which dropped)."""
    # in place wherever a temporary is not needed again: the chunk's float64 arrays alive at once are
    # what CHECK_FLOAT64_ARRAYS counts (and the memory estimate with it)
    res64 = residual.double()
    kept64 = Gelu().reference(x.double().add_(bias.double())).div_(1.0 - prob).add_(res64)
    out64 = out.double()
    dropped = (out64 - res64).abs_() <= (out64 - kept64).abs_()
    ref = torch.where(dropped, res64, kept64)
    # A kept element is the sum of two terms the op rounds to `dtype` before adding them; where they
    # nearly cancel, their rounding errors are large against the sum (seen on an H100 and an H200:
    # 2-4 of 4.2M bfloat16 elements off by 0.024 at 0.055). The relative bound is taken of the terms'
    # sizes, |residual| + |kept term|, instead of the sum's: compare() bounds by rtol x |sum|, so the
    # extra is rtol x (what cancellation took away), zero where the terms have one sign.
    cancelled = res64.abs().add_((kept64 - res64).abs_()).sub_(kept64.abs()).clamp_min_(0.0)
    extra = cancelled.mul_(tolerance(dtype).rtol).masked_fill_(dropped, 0.0)
    message = compare(out64, ref, dtype, what="output (each element matched to dropped or kept)", extra_atol=extra)
    if message:
        return message, 0, 0
    # "clearly" is relative to the chunk's RMS (standard normal draws: 1 up to sampling noise)
    clear = (kept64 - res64).abs() > 0.05 * float(res64.square().mean().sqrt())
    return None, int(clear.sum()), int((dropped & clear).sum())


POINTWISE_OPS = (Copy, Scale, Add, Triad, Gelu, CosCos, BiasGeluDropoutResidual)
for _op in POINTWISE_OPS:
    register(_op)
