"""The elementary-function probe (family "probe"): the throughput of cos, exp and erf, the
special-function twin of `fma_intensity`.

elementary: y[i] = b_k with b_0 = x[i] and b_j = f(b_{j-1}), f one of
  cos   b_j = cos(b_{j-1})
  exp   b_j = exp(-b_{j-1})   (the sign keeps the chain bounded: after the first step b lies in (0, e^5))
  erf   b_j = erf(b_{j-1}) + 1/2  (the shift puts the fixed point, about 1.46, where erf is flat:
        erf(b) alone has slope 1.13 at 0, where an error would grow at every step)
k dependent evaluations per element loaded and one store. FLOPs k·n for cos and exp, 2·k·n for erf
(an elementary function counts as one FLOP, as in every op's model; the add of erf's step is the
second; exp's negation is free), bytes 2·n·s, elementary functions {f: k·n}. With k large the bytes
are negligible and the figure is the device's rate of f: the roof the diagnosis holds an op's
elementary functions against (reports.roofs.ceilings, kind `elementary`). Each chain is contractive after
its first steps, so the float32 result of k evaluations stays within a few ulps of the float64
reference.

Backend: compiled (torch.compile of the unrolled chain: Triton on a GPU, C++ with vectorised libm
on a CPU), the code a compiled op's elementary functions become. 16-bit inputs are computed in
float32 inside the one fused kernel (inductor's upcast), as a compiled pointwise op computes them.
"""
from __future__ import annotations

from typing import Any

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.lazy import torch
from rooflab.suite.ops.base import Params, ParamSpec, Prepared
from rooflab.suite.ops.common import TorchOp, as_torch, compare_chunked, esize, fresh_compile, generator, randn
from rooflab.suite.ops.registry import register
from rooflab.vocab import ElementaryFunction

MAX_ELEMENTARY_K = 4096
ERF_SHIFT = 0.5
# FLOPs of one step of the chain besides the elementary function itself
EXTRA_FLOPS_PER_STEP = {ElementaryFunction.COS: 0, ElementaryFunction.EXP: 0, ElementaryFunction.ERF: 1}


def _step(b: torch.Tensor, function: str) -> torch.Tensor:
    if function == ElementaryFunction.COS:
        return torch.cos(b)
    if function == ElementaryFunction.EXP:
        return torch.exp(-b)
    if function == ElementaryFunction.ERF:
        return torch.erf(b) + ERF_SHIFT
    raise ValueError(f"no elementary function {function!r}; allowed: {', '.join(ElementaryFunction)}")


def elementary_chain(x: torch.Tensor, k: int, function: str) -> torch.Tensor:
    """b_k of the chain (the module docstring); in x's dtype, or float64 for the reference."""
    b = x
    for _ in range(k):
        b = _step(b, function)
    return b


class Elementary(TorchOp):
    """See the module docstring. FLOPs k·n (2·k·n for erf); bytes 2·n·s; elementary functions {fn: k·n}."""

    name = "elementary"
    family = "probe"
    params = {
        "n": ParamSpec(int, 1 << 22, "elements loaded (and stored)"),
        "k": ParamSpec(int, 64, f"dependent evaluations per element, 1 to {MAX_ELEMENTARY_K}"),
        "fn": ParamSpec(str, "cos", "the elementary function", choices=tuple(str(f) for f in ElementaryFunction),
                        positive=False),
    }
    backends = ("compiled",)
    dtypes = ("float64", "float32", "float16", "bfloat16")

    def flops(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        per_step = 1 + EXTRA_FLOPS_PER_STEP[ElementaryFunction(str(p["fn"]))]
        return per_step * int(p["k"]) * int(p["n"])

    def bytes_read(self, params: Params, dtype: str) -> int:
        """x, n elements."""
        return int(self.p(params)["n"]) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        """y, n elements."""
        return int(self.p(params)["n"]) * esize(dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return self.bytes(params, dtype)

    def elementary(self, params: Params, dtype: str) -> dict[ElementaryFunction, int]:
        p = self.p(params)
        return {ElementaryFunction(str(p["fn"])): int(p["k"]) * int(p["n"])}

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        k = int(self.p(case.params)["k"])
        if not 1 <= k <= MAX_ELEMENTARY_K:
            return f"k must be between 1 and {MAX_ELEMENTARY_K}, got {k}"
        return None

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        p = self.p(case.params)
        n, k, function = int(p["n"]), int(p["k"]), str(p["fn"])
        x = randn(n, case.dtype, device, generator(device, seed))
        compiled = fresh_compile(elementary_chain)
        fn = lambda: compiled(x, k, function)  # noqa: E731 - the timed callable, one line per backend

        def check(output: Any) -> str | None:
            out = as_torch(output)
            if tuple(out.shape) != (n,):
                return f"output has shape {tuple(out.shape)}, expected {(n,)}"
            return compare_chunked(
                out.reshape(-1, 1), lambda rows: elementary_chain(x[rows].double(), k, function).reshape(-1, 1),
                case.dtype,
            )

        return Prepared(fn=fn, check=check)


register(Elementary)
