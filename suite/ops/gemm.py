"""GEMM ops: matmul (optionally batched, float8 through torch._scaled_mm) and matmul + bias + gelu.

The float8 GEMM takes `fast_accum` (torch._scaled_mm's use_fast_accum; false by default): both
variants are separate cases. Every op here with a compiled backend takes `compile_mode` (default,
max-autotune-no-cudagraphs). Default Inductor keeps the GEMM of matmul_bias_gelu in cuBLAS (an
extern call) on a GPU: for float32/tf32 it unfuses addmm into mm + one Triton kernel that adds the
bias and applies gelu; for float16/bfloat16 (torch's keep_addmm_fused_for_half_dtypes) the bias
stays in cuBLAS's addmm and gelu is a Triton kernel of its own. Either way the GEMM output makes
one extra round trip through memory. max-autotune-no-cudagraphs also benchmarks Triton GEMM
templates, which can take gelu into the GEMM's epilogue.

matmul C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]: FLOPs 2·m·n·k·batch; bytes
(m·k + k·n + m·n)·s·batch (docs/design.md): A and B read, C written. For float8_e4m3fn, A and B are 1-byte operands with
per-tensor float32 scales and C is written in bfloat16, so bytes are (m·k + k·n)·1 + m·n·2 (each
operand counted at its own element size; batch must be 1).

Checks compare a random subset of at most 64 rows of C (from at most 4 batch entries) with a
float64 reference computed on the device from the same (rounded) inputs, so that checking a
large GEMM costs a small fraction of the GEMM itself.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.dtypes import storage_dtype
from rooflab.suite.lazy import F, torch
from rooflab.suite.ops.base import Params, ParamSpec, Prepared
from rooflab.suite.ops.common import (
    COMPILE_MODE_PARAM,
    TorchOp,
    as_torch,
    compare,
    esize,
    fresh_compile,
    generator,
    randn,
    require_cupy,
    sample_indices,
)
from rooflab.suite.ops.pointwise import Gelu, cupy_stream
from rooflab.suite.ops.registry import register
from rooflab.vocab import ElementaryFunction

CHECK_ROWS = 64
CHECK_BATCHES = 4
FP8_DTYPES = ("float8_e4m3fn",)
FP8_MAX = 448.0  # largest finite float8_e4m3fn
# use_fast_accum lets the tensor core keep its partial sums in its own accumulator, which holds
# about 14 mantissa bits on Hopper, instead of promoting them to float32 every few k-blocks; the
# check widens its bound by that accumulator's roundoff over a random walk of k terms
FAST_ACCUM_ROUNDOFF = 2.0**-13


@contextlib.contextmanager
def float32_matmul_precision(dtype: str) -> Iterator[None]:
    """tf32 -> "high" (TF32 tensor cores), float32 -> "highest" (IEEE float32), restored after."""
    if storage_dtype(dtype) != "float32":
        yield
        return
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def _with_precision(dtype: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    if storage_dtype(dtype) != "float32":
        return fn

    def wrapped() -> Any:
        with float32_matmul_precision(dtype):
            return fn()

    return wrapped


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def _check_rows(
    out: torch.Tensor,
    a64: Callable[[int, torch.Tensor], torch.Tensor],
    b64: Callable[[int], torch.Tensor],
    epilogue: Callable[[torch.Tensor], torch.Tensor] | None,
    dtype: str,
    k: int,
    seed: int,
    accumulator_roundoff: float = 0.0,
) -> str | None:
    """Compare sampled rows of out[batch, m, n] with float64 references (see module docstring).
    `accumulator_roundoff` > 0 adds 8·u·√k times the rows' RMS to the bound (a low-precision
    accumulator: float8 fast_accum)."""
    batch, m = out.shape[0], out.shape[1]
    for bi in sample_indices(batch, CHECK_BATCHES, seed).tolist():
        rows = sample_indices(m, CHECK_ROWS, seed + bi).to(out.device)
        ref = a64(bi, rows) @ b64(bi)
        if epilogue is not None:
            ref = epilogue(ref)
        extra = None
        if accumulator_roundoff > 0:
            extra = ref.square().mean().sqrt() * (8.0 * accumulator_roundoff * k**0.5)
        message = compare(
            out[bi].index_select(0, rows), ref, dtype, accumulation=k, what=f"rows of batch entry {bi}",
            extra_atol=extra
        )
        if message:
            return message + f" (checked {rows.numel()} sampled rows)"
    return None


class Matmul(TorchOp):
    """C = A @ B (batched when batch > 1). See the module docstring for counts and the check."""

    name = "matmul"
    family = "gemm"
    params = {
        "m": ParamSpec(int, 512, "rows of A and C"),
        "n": ParamSpec(int, 512, "columns of B and C"),
        "k": ParamSpec(int, 512, "columns of A, rows of B"),
        "batch": ParamSpec(int, 1, "independent GEMMs (torch.matmul on 3-D tensors)"),
        "fast_accum": ParamSpec(
            bool,
            False,
            "float8 only: torch._scaled_mm use_fast_accum (accumulate in the tensor core's reduced-precision "
            "accumulator without periodic promotion to float32: faster, less accurate)",
            positive=False,
            in_key_at_default=False,
        ),
        "compile_mode": COMPILE_MODE_PARAM,
    }
    backends = ("eager", "compiled", "cupy")
    dtypes = ("float64", "float32", "tf32", "float16", "bfloat16", "float8_e4m3fn")
    backend_dtypes = {"compiled": ("float64", "float32", "tf32", "float16", "bfloat16")}

    def flops(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        return 2 * int(p["m"]) * int(p["n"]) * int(p["k"]) * int(p["batch"])

    def bytes_read(self, params: Params, dtype: str) -> int:
        """A and B: (m·k + k·n)·s·batch."""
        p = self.p(params)
        m, n, k, batch = int(p["m"]), int(p["n"]), int(p["k"]), int(p["batch"])
        return (m * k + k * n) * esize(dtype) * batch

    def bytes_written(self, params: Params, dtype: str) -> int:
        """C: m·n·s·batch (bfloat16 for a float8 GEMM)."""
        p = self.p(params)
        m, n, batch = int(p["m"]), int(p["n"]), int(p["batch"])
        return m * n * esize("bfloat16" if dtype in FP8_DTYPES else dtype) * batch

    def memory_bytes(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        m, n, k, batch = int(p["m"]), int(p["n"]), int(p["k"]), int(p["batch"])
        if dtype in FP8_DTYPES:
            # float32 draws of A and B before quantisation, the fp8 copies, the bfloat16 output
            return (m * k + k * n) * (4 + 1) + m * n * 2 + k * n * 8
        # + the float64 copy of one B that the check makes
        return (m * k + k * n + m * n) * esize(dtype) * batch + k * n * 8

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        p = self.p(case.params)
        if bool(p["fast_accum"]) and case.dtype not in FP8_DTYPES:
            return f"fast_accum applies to float8 GEMMs only (dtype is {case.dtype})"
        if case.dtype in FP8_DTYPES:
            if case.backend != "eager":
                return "float8 matmul (torch._scaled_mm) runs with the eager backend only"
            cc = device.compute_capability
            if cc is None or tuple(cc) < (8, 9):
                return f"float8 scaled matmul needs compute capability >= 8.9 (device has {cc})"
            if not hasattr(torch, "_scaled_mm"):
                return "this torch has no torch._scaled_mm"
            if int(p["batch"]) != 1:
                return "float8 scaled matmul supports batch = 1 only"
            bad = [name for name in ("m", "n", "k") if int(p[name]) % 16]
            if bad:
                return f"float8 scaled matmul needs m, n, k divisible by 16 ({', '.join(bad)} is not)"
        if case.dtype == "tf32":
            cc = device.compute_capability
            if cc is not None and tuple(cc) < (8, 0):
                return f"tf32 needs compute capability >= 8.0 (device has {cc})"
        if case.backend == "cupy" and case.dtype not in ("float64", "float32", "float16"):
            return f"cupy.matmul does not run {case.dtype}"
        return None

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        p = self.p(case.params)
        m, n, k, batch = int(p["m"]), int(p["n"]), int(p["k"]), int(p["batch"])
        gen = generator(device, seed)
        if case.dtype in FP8_DTYPES:
            return self._prepare_fp8(case, device, gen, m, n, k, seed, bool(p["fast_accum"]))
        a = randn((batch, m, k), case.dtype, device, gen)
        b = randn((batch, k, n), case.dtype, device, gen)
        if batch == 1:  # plain 2-D GEMM: torch.mm path, no batch dimension
            a2, b2 = a[0], b[0]
        out = torch.empty((m, n) if batch == 1 else (batch, m, n), dtype=a.dtype, device=a.device)
        graph_safe = True
        if case.backend == "eager":
            if batch == 1:
                fn = _with_precision(case.dtype, lambda: torch.mm(a2, b2, out=out))
            else:
                fn = _with_precision(case.dtype, lambda: torch.matmul(a, b, out=out))
        elif case.backend == "compiled":
            compiled = fresh_compile(_matmul, str(p["compile_mode"]))
            fn = _with_precision(case.dtype, (lambda: compiled(a2, b2)) if batch == 1 else (lambda: compiled(a, b)))
        elif case.backend == "cupy":
            cp = require_cupy()
            ca, cb = cp.from_dlpack(a2 if batch == 1 else a), cp.from_dlpack(b2 if batch == 1 else b)
            cout = cp.from_dlpack(out)

            def fn() -> Any:
                with cupy_stream(cp):
                    cp.matmul(ca, cb, out=cout)
                return cout

            graph_safe = False  # cuBLAS through CuPy's handle is not known to be capture-safe
        else:
            raise ValueError(f"op matmul has no backend {case.backend!r}")

        def check(output: Any) -> str | None:
            got = as_torch(output)
            if got.dim() == 2:
                got = got.unsqueeze(0)
            if tuple(got.shape) != (batch, m, n):
                return (f"output has shape {tuple(as_torch(output).shape)}, "
                        f"expected {(m, n) if batch == 1 else (batch, m, n)}")
            return _check_rows(
                got,
                lambda bi, rows: a[bi].index_select(0, rows).double(),
                lambda bi: b[bi].double(),
                None,
                case.dtype,
                k,
                seed,
            )

        return Prepared(fn=fn, check=check, graph_safe=graph_safe)

    def _prepare_fp8(
        self, case: Case, device: DeviceInfo, gen: torch.Generator, m: int, n: int, k: int, seed: int, fast_accum: bool
    ) -> Prepared:
        fp8 = getattr(torch, case.dtype)
        a32 = randn((m, k), "float32", device, gen)
        bt32 = randn((n, k), "float32", device, gen)  # B stored column-major: B = bt.t()
        scale_a = (a32.abs().max() / FP8_MAX).float().reshape(())
        scale_b = (bt32.abs().max() / FP8_MAX).float().reshape(())
        a8 = (a32 / scale_a).to(fp8)
        b8 = (bt32 / scale_b).to(fp8).t()
        del a32, bt32

        def fn() -> torch.Tensor:
            return torch._scaled_mm(
                a8, b8, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16, use_fast_accum=fast_accum
            )

        sa, sb = float(scale_a), float(scale_b)

        def check(output: Any) -> str | None:
            got = as_torch(output)
            if tuple(got.shape) != (m, n):
                return f"output has shape {tuple(got.shape)}, expected {(m, n)}"
            # reference from the quantised operands: exact in float64
            return _check_rows(
                got.unsqueeze(0),
                # gather through a uint8 view: index kernels need not support float8
                lambda bi, rows: a8.view(torch.uint8).index_select(0, rows).view(fp8).double() * sa,
                lambda bi: b8.double() * sb,
                None,
                case.dtype,
                k,
                seed,
                FAST_ACCUM_ROUNDOFF if fast_accum else 0.0,
            )

        return Prepared(fn=fn, check=check)


def _matmul_bias_gelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(torch.addmm(bias, a, b))


class MatmulBiasGelu(TorchOp):
    """Y = gelu(A @ B + bias), A [m, k], B [k, n], bias [n]: the epilogue fusion case (eager runs
    the GEMM and the epilogue as separate kernels; compiled may fuse the epilogue).

    FLOPs 2·m·n·k + 6·m·n (bias add 1 and gelu 5 per output element, gelu as op gelu);
    bytes (m·k + k·n + m·n + n)·s. The check samples rows as matmul does."""

    name = "matmul_bias_gelu"
    family = "gemm"
    fusion_chain = True
    params = {
        "m": ParamSpec(int, 512, "rows of A and Y"),
        "n": ParamSpec(int, 512, "columns of B and Y, length of bias"),
        "k": ParamSpec(int, 512, "columns of A, rows of B"),
        "compile_mode": COMPILE_MODE_PARAM,
    }
    backends = ("eager", "compiled")
    dtypes = ("float32", "tf32", "float16", "bfloat16")

    def flops(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
        return 2 * m * n * k + 6 * m * n

    def elementary(self, params: Params, dtype: str) -> dict[ElementaryFunction, int]:
        """One erf per output element (the gelu)."""
        p = self.p(params)
        return {ElementaryFunction.ERF: int(p["m"]) * int(p["n"])}

    def unfused_bytes(self, params: Params, dtype: str) -> int:
        """matmul (mk + kn + mn), + bias (2mn + n), gelu (2mn): (mk + kn + 5mn + n)·s."""
        p = self.p(params)
        m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
        return (m * k + k * n + 5 * m * n + n) * esize(dtype)

    def bytes_read(self, params: Params, dtype: str) -> int:
        """A, B and the bias: (m·k + k·n + n)·s."""
        p = self.p(params)
        m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
        return (m * k + k * n + n) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        """Y: m·n·s."""
        p = self.p(params)
        return int(p["m"]) * int(p["n"]) * esize(dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
        # + the eager GEMM result before gelu, + the float64 copy of B that the check makes
        return (m * k + k * n + 2 * m * n + n) * esize(dtype) + k * n * 8

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        cc = device.compute_capability
        if case.dtype == "tf32" and cc is not None and tuple(cc) < (8, 0):
            return f"tf32 needs compute capability >= 8.0 (device has {cc})"
        return None

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        p = self.p(case.params)
        m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
        gen = generator(device, seed)
        a = randn((m, k), case.dtype, device, gen)
        b = randn((k, n), case.dtype, device, gen)
        bias = randn(n, case.dtype, device, gen)
        if case.backend == "compiled":
            compiled = fresh_compile(_matmul_bias_gelu, str(p["compile_mode"]))
            fn = _with_precision(case.dtype, lambda: compiled(a, b, bias))
        else:
            fn = _with_precision(case.dtype, lambda: _matmul_bias_gelu(a, b, bias))
        gelu64 = Gelu().reference
        bias64 = bias.double()

        def check(output: Any) -> str | None:
            got = as_torch(output)
            if tuple(got.shape) != (m, n):
                return f"output has shape {tuple(got.shape)}, expected {(m, n)}"
            return _check_rows(
                got.unsqueeze(0),
                lambda bi, rows: a.index_select(0, rows).double(),
                lambda bi: b.double(),
                lambda y: gelu64(y + bias64),
                case.dtype,
                k,
                seed,
            )

        return Prepared(fn=fn, check=check)


register(Matmul)
register(MatmulBiasGelu)
