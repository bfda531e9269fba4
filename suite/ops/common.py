"""Helpers shared by the op modules: seeded inputs, skip rules, compilation, CuPy access and the
comparison of an output with its float64 reference."""
from __future__ import annotations

import functools
import math
import shutil
import types
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.dtypes import element_size, tolerance, torch_dtype
from rooflab.suite.lazy import torch
from rooflab.suite.ops.base import Op, Params, ParamSpec
from rooflab.vocab import DeviceKind

CUDA_ONLY_DTYPES = ("tf32", "float8_e4m3fn", "float8_e5m2")
# Elements compared per chunk, so that the float64 reference never needs much more memory than
# the case itself.
CHECK_CHUNK_ELEMENTS = 1 << 22


# ---------------------------------------------------------------- inputs


def generator(device: DeviceInfo, seed: int) -> torch.Generator:
    gen = torch.Generator(device=device.torch_device)
    gen.manual_seed(int(seed))
    return gen


def randn(shape: Iterable[int] | int, dtype: str, device: DeviceInfo, gen: torch.Generator) -> torch.Tensor:
    """Standard-normal values on the device, drawn directly in `dtype` where torch can (float64,
    float32/tf32, float16, bfloat16: no temporary copy), otherwise drawn in float32 and rounded."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    target = torch_dtype(dtype)
    if target in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        return torch.randn(shape, generator=gen, dtype=target, device=device.torch_device)
    values = torch.randn(shape, generator=gen, dtype=torch.float32, device=device.torch_device)
    return values.to(target)


# ---------------------------------------------------------------- availability


@functools.lru_cache(maxsize=1)
def cupy_module() -> Any | None:
    """The cupy module, or None when it cannot be imported."""
    try:
        import cupy  # noqa: PLC0415 - optional: imported only when a cupy case asks
    except Exception:  # ImportError, or a CUDA library problem raised at import
        return None
    return cupy


def require_cupy() -> Any:
    """The cupy module, for a cupy-backend case that `cupy_skip_reason` has let run."""
    cp = cupy_module()
    if cp is None:
        raise RuntimeError("the cupy backend needs cupy, which cannot be imported here")
    return cp


def cupy_skip_reason(device: DeviceInfo, dtype: str) -> str | None:
    if cupy_module() is None:
        return "cupy is not installed"
    if not device.is_cuda:
        return "the cupy backend needs a CUDA device"
    if dtype in ("bfloat16", "tf32") or dtype.startswith("float8"):
        return f"cupy has no {dtype} arrays"
    return None


@functools.lru_cache(maxsize=4)
def compiled_skip_reason(kind: str) -> str | None:
    """Why torch.compile cannot run on a device of this kind ("cuda" or "cpu"), or None."""
    try:
        import torch._dynamo  # noqa: PLC0415 - loaded only when a compiled case asks

        if not torch._dynamo.is_dynamo_supported():
            return "torch.compile (dynamo) is not supported on this Python/torch build"
    except Exception as exc:
        return f"torch.compile is unavailable: {exc}"
    if kind == DeviceKind.CUDA:
        try:
            from torch.utils._triton import has_triton  # noqa: PLC0415 - only for compiled CUDA cases

            if not has_triton():
                return "torch.compile on CUDA needs triton, which is not installed"
        except Exception as exc:
            return f"cannot tell whether triton is available: {exc}"
    elif not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "torch.compile on the CPU needs a C++ compiler (g++, c++ or clang++), none is on the PATH"
    return None


COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
# the option every op with a compiled backend takes; left out of case keys at its default
COMPILE_MODE_PARAM = ParamSpec(
    str,
    "default",
    "torch.compile mode of the compiled backend: default (Inductor's fusions, library GEMMs) or "
    "max-autotune-no-cudagraphs (also autotunes Triton GEMM templates against cuBLAS, no CUDA graphs)",
    choices=COMPILE_MODES,
    positive=False,
    in_key_at_default=False,
)


def compile_mode_skip_reason(case: Case, params: Params) -> str | None:
    """A compile_mode other than default asked of a backend that does not compile."""
    mode = params.get("compile_mode", "default")
    if case.backend != "compiled" and mode != "default":
        return f"compile_mode {mode} applies to the compiled backend only (this case's backend is {case.backend})"
    return None


def fresh_compile(fn: Callable[..., Any], mode: str = "default") -> Callable[..., Any]:
    """torch.compile of a private copy of `fn` with static shapes, in compile mode `mode`.

    Dynamo caches compiled code on the function's code object; compiling a copy keeps every
    prepared case on its own cache entry (no recompilation limit, no switch to dynamic shapes
    when a sweep calls the same function with another size). Compilation happens at the first
    call, so its cost lands in the runner's first-call time. Inductor's FX graph cache (on by
    default; TORCHINDUCTOR_CACHE_DIR, which the nightly keeps under its output directory) serves
    the copy's graph when the same graph at the same shapes was compiled before: in this run by
    another cache or timing mode of the case, or on an earlier night.
    """
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode {mode!r}: allowed: {', '.join(COMPILE_MODES)}")
    code = fn.__code__.replace()
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return torch.compile(copy, dynamic=False, mode=None if mode == "default" else mode)


class TorchOp(Op):
    """Common skip rules; subclasses add their own in `extra_skip_reason`."""

    # dtypes that only some backends support: backend -> dtypes it supports (default: all of the op's)
    backend_dtypes: ClassVar[dict[str, tuple[str, ...]]] = {}

    def skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        allowed = self.backend_dtypes.get(case.backend)
        if allowed is not None and case.dtype not in allowed:
            return f"op {self.name} with the {case.backend} backend supports only {', '.join(allowed)}"
        if not device.is_cuda and case.dtype in CUDA_ONLY_DTYPES:
            return f"dtype {case.dtype} needs a CUDA GPU"
        if case.backend == "cupy":
            reason = self.cupy_skip(case, device)
            if reason:
                return reason
        if case.backend == "compiled":
            reason = compiled_skip_reason(device.kind)
            if reason:
                return reason
        reason = compile_mode_skip_reason(case, self.p(case.params))
        if reason:
            return reason
        return self.extra_skip_reason(case, device)

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        return None

    def cupy_skip(self, case: Case, device: DeviceInfo) -> str | None:
        return cupy_skip_reason(device, case.dtype)

    def p(self, params: Params) -> dict[str, Any]:
        """Params with defaults filled in."""
        return self.with_defaults(params)


def esize(dtype: str) -> int:
    return element_size(dtype)


# ---------------------------------------------------------------- checking


def as_torch(output: Any) -> torch.Tensor:
    """A torch tensor view of an op output (torch tensor, or a CuPy array via DLPack)."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "__dlpack__"):
        return torch.from_dlpack(output)
    return torch.as_tensor(output)


def compare(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: str,
    accumulation: int = 1,
    what: str = "output",
    extra_atol: torch.Tensor | None = None,
) -> str | None:
    """None when `out` matches the float64 `ref` within the dtype's tolerance, else a message
    with the largest absolute and relative errors. `extra_atol` (broadcast against `ref`) widens
    the bound per element by an error the op's algorithm is documented to add (e.g. rounding of
    an intermediate that it stores in `dtype`)."""
    if tuple(out.shape) != tuple(ref.shape):
        return f"{what} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    out64 = out.to(torch.float64)
    ref64 = ref.to(torch.float64)
    finite = torch.isfinite(out64)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return f"{what} has {bad} non-finite value(s) (NaN or inf)"
    if out64.numel() == 0:
        return None
    tol = tolerance(dtype, accumulation)
    scale = float(ref64.square().mean().sqrt())
    err = (out64 - ref64).abs()
    limit = tol.atol(scale) + tol.rtol * ref64.abs()
    if extra_atol is not None:
        limit = limit + extra_atol.to(torch.float64)
    excess = err > limit
    if bool(excess.any()):
        worst = int((err - limit).flatten().argmax())
        abs_err = float(err.max())
        rel = err / ref64.abs().clamp_min(max(scale, 1e-300) * 1e-6)
        rel_err = float(rel.max())
        flat_out = out64.flatten()
        flat_ref = ref64.flatten()
        return (
            f"{what}: {int(excess.sum())} of {err.numel()} elements outside tolerance "
            f"(rtol {tol.rtol:.2g}, atol {tol.atol(scale):.3g} for {dtype}, accumulation {accumulation}); "
            f"max abs error {abs_err:.4g}, max rel error {rel_err:.4g}; worst at flat index {worst}: "
            f"got {float(flat_out[worst]):.6g}, expected {float(flat_ref[worst]):.6g}"
        )
    return None


def compare_chunked(
    out: torch.Tensor,
    reference: Callable[[slice], torch.Tensor],
    dtype: str,
    accumulation: int = 1,
    what: str = "output",
    input_row_elements: int = 1,
) -> str | None:
    """Compare `out` with `reference(rows)` (the float64 reference of out[rows]) chunk by chunk
    along the first dimension, so the reference never holds more than a chunk. A chunk is sized
    by the larger of an output row and an input row (`input_row_elements`, e.g. the cols a row
    reduction reads)."""
    if out.dim() == 0:
        return compare(out, reference(slice(None)), dtype, accumulation, what)
    rows = out.shape[0]
    per_row = max(1, out[0].numel() if rows else 1, int(input_row_elements))
    step = max(1, CHECK_CHUNK_ELEMENTS // per_row)
    for start in range(0, rows, step):
        rows_slice = slice(start, min(rows, start + step))
        message = compare(out[rows_slice], reference(rows_slice), dtype, accumulation, what)
        if message:
            return message if start == 0 and rows <= step else f"{message} (rows {start}..{rows_slice.stop - 1})"
    return None


def sample_indices(count: int, limit: int, gen_seed: int) -> torch.Tensor:
    """Up to `limit` distinct indices in [0, count), drawn reproducibly on the CPU, sorted."""
    if count <= limit:
        return torch.arange(count)
    gen = torch.Generator().manual_seed(int(gen_seed) + 7919)
    return torch.randperm(count, generator=gen)[:limit].sort().values


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def prod(values: Iterable[int]) -> int:
    return math.prod(int(v) for v in values)
