"""Row-wise reductions and normalisations over x[rows, cols].

Counts (s = element size; the bytes are x and the weights read, the output written):
  sum      out[r] = Σ_c x[r, c]                 FLOPs rows·cols      bytes (rows·cols + rows)·s
  amax     out[r] = max_c x[r, c]               FLOPs rows·cols (a comparison counts as one)
                                                bytes (rows·cols + rows)·s
  softmax  out = exp(x - max) / Σ exp(x - max)  FLOPs 5·rows·cols (max, subtract, exp, add, divide)
                                                bytes 2·rows·cols·s
  layernorm out = (x - mean)·rstd·w + b         FLOPs 8·rows·cols (mean 1, variance 3, normalise 2,
                                                affine 2; per-row rsqrt not counted)
                                                bytes (2·rows·cols + 2·cols)·s (x, out, weight, bias)
  rmsnorm  out = x·rsqrt(mean(x²) + eps)·w      FLOPs 4·rows·cols (square-add 2, normalise 1, weight 1)
                                                bytes (2·rows·cols + cols)·s (x, out, weight)

The float64 reference is computed from the same inputs on the device, a block of rows at a time.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.lazy import F, torch
from rooflab.suite.ops.base import Params, ParamSpec, Prepared
from rooflab.suite.ops.common import (
    COMPILE_MODE_PARAM,
    TorchOp,
    as_torch,
    compare_chunked,
    esize,
    fresh_compile,
    generator,
    randn,
)
from rooflab.suite.ops.registry import register
from rooflab.vocab import ElementaryFunction

EPS = 1e-5
ROWS_COLS = {
    "rows": ParamSpec(int, 1024, "independent rows"),
    "cols": ParamSpec(int, 1024, "elements reduced per row"),
    "compile_mode": COMPILE_MODE_PARAM,
}


def _sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def _amax(x: torch.Tensor) -> torch.Tensor:
    return x.amax(dim=-1)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, EPS)


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, EPS)


class RowOp(TorchOp):
    family = "reduction"
    params = ROWS_COLS
    backends = ("eager", "compiled")
    dtypes: ClassVar[tuple[str, ...]] = ("float64", "float32", "float16", "bfloat16")
    flops_per_element: ClassVar[int] = 1
    keeps_shape: ClassVar[bool] = False  # output [rows, cols] (normalisations) or [rows] (reductions)
    weight_vectors: ClassVar[int] = 0  # vectors of cols elements read besides x (weight, bias)
    exact: ClassVar[bool] = False  # output is one of the inputs (amax): no accumulation error

    def flops(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        return self.flops_per_element * int(p["rows"]) * int(p["cols"])

    def bytes_read(self, params: Params, dtype: str) -> int:
        """x (rows·cols) and the weight vectors (cols each)."""
        p = self.p(params)
        rows, cols = int(p["rows"]), int(p["cols"])
        return (rows * cols + self.weight_vectors * cols) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        """The output: rows·cols (normalisations) or rows (reductions)."""
        p = self.p(params)
        rows, cols = int(p["rows"]), int(p["cols"])
        return (rows * cols if self.keeps_shape else rows) * esize(dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        # x, output, weights, plus one float32 temporary of x's size that a kernel or the
        # compiled form may keep (upcast of 16-bit inputs)
        p = self.p(params)
        rows, cols = int(p["rows"]), int(p["cols"])
        return self.bytes(params, dtype) + rows * cols * 4

    # the op on x and its weight vectors (each op defines it as a staticmethod)
    function: ClassVar[Callable[..., torch.Tensor]]

    def reference(self, x64: torch.Tensor, *weights64: torch.Tensor) -> torch.Tensor:
        return self.function(x64, *weights64)

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        p = self.p(case.params)
        rows, cols = int(p["rows"]), int(p["cols"])
        gen = generator(device, seed)
        x = randn((rows, cols), case.dtype, device, gen)
        weights = tuple(randn(cols, case.dtype, device, gen) for _ in range(self.weight_vectors))
        fn_impl = fresh_compile(self.function, str(p["compile_mode"])) if case.backend == "compiled" else self.function
        fn = lambda: fn_impl(x, *weights)  # noqa: E731 - the timed callable, one line per backend
        accumulation = 1 if self.exact else cols
        weights64 = tuple(w.double() for w in weights)

        def check(output: Any) -> str | None:
            out = as_torch(output)
            if not self.keeps_shape:
                if tuple(out.shape) != (rows,):
                    return f"output has shape {tuple(out.shape)}, expected {(rows,)}"
                out = out.reshape(rows, 1)
                return compare_chunked(
                    out, lambda r: self.reference(x[r].double(), *weights64).reshape(-1, 1), case.dtype, accumulation,
                    input_row_elements=cols,
                )
            return compare_chunked(
                out, lambda r: self.reference(x[r].double(), *weights64), case.dtype, accumulation,
                input_row_elements=cols,
            )

        return Prepared(fn=fn, check=check)


class Sum(RowOp):
    """Row sum. FLOPs rows·cols; bytes (rows·cols + rows)·s."""

    name = "sum"
    reads_only = True
    flops_per_element = 1
    function = staticmethod(_sum)


class Amax(RowOp):
    """Row maximum. FLOPs rows·cols (one comparison per element); bytes (rows·cols + rows)·s."""

    name = "amax"
    reads_only = True
    flops_per_element = 1
    exact = True
    function = staticmethod(_amax)


class Softmax(RowOp):
    """Row softmax. FLOPs 5·rows·cols; bytes 2·rows·cols·s; one exp per element."""

    name = "softmax"
    flops_per_element = 5
    keeps_shape = True
    function = staticmethod(_softmax)

    def elementary(self, params: Params, dtype: str) -> dict[ElementaryFunction, int]:
        p = self.p(params)
        return {ElementaryFunction.EXP: int(p["rows"]) * int(p["cols"])}


class LayerNorm(RowOp):
    """Layer norm over cols with weight and bias (eps 1e-5). FLOPs 8·rows·cols; bytes
    (2·rows·cols + 2·cols)·s."""

    name = "layernorm"
    flops_per_element = 8
    keeps_shape = True
    weight_vectors = 2
    function = staticmethod(_layernorm)


class RmsNorm(RowOp):
    """RMS norm over cols with weight (eps 1e-5). FLOPs 4·rows·cols; bytes (2·rows·cols + cols)·s."""

    name = "rmsnorm"
    flops_per_element = 4
    keeps_shape = True
    weight_vectors = 1
    function = staticmethod(_rmsnorm)

    def reference(self, x64: torch.Tensor, *weights64: torch.Tensor) -> torch.Tensor:
        (weight64,) = weights64  # the base signature takes any number of weight vectors; rmsnorm has one
        return x64 * torch.rsqrt(x64.square().mean(dim=-1, keepdim=True) + EPS) * weight64


for _op in (Sum, Amax, Softmax, LayerNorm, RmsNorm):
    register(_op)
