"""transformer_block (family `layer`): one pre-norm decoder block, timed as a whole.

    y = h1 + mlp(norm2(h1)),  h1 = x + out_proj(attention(qkv(norm1(x))))

x is [batch, seq, hidden]; attention is causal self-attention through
torch.nn.functional.scaled_dot_product_attention restricted to one kernel (param `kernel`, as
the attention op: sdpa_flash, sdpa_efficient, sdpa_cudnn, sdpa_math; a kernel that cannot run the
case is skipped with torch's reason); the MLP is up / GELU (exact) / down, or SwiGLU (gate and up
projections in one matmul of width 2F, silu(gate)·up, down). No biases. Weights are drawn from
N(0, 1/fan_in) so that activations stay of order one.

`pass`: `forward` times the forward call; `forward_backward` the forward and the backward of
sum(y·g) for a fixed random g (gradients of x and of every weight; `.grad` is cleared before
each call so that no call accumulates).

FLOPs and bytes are the sums of the parts' models (suite.ops.layer_model, which documents every
term). The check compares the output (and with forward_backward, the gradient of x) of up to two
batch entries with a float64 reference of the block computed from the same weights and inputs;
the block stores its intermediates in the case's dtype, so the allowance of a 16-bit dtype grows
with the number of rounded intermediates between input and output (see `_rounding_allowance`).

The eager backend also provides a profiled call (`Prepared.profiled`) with a profiler range
around each part, which runners.engine.attribution splits the block's time with; the compiled backend
(torch.compile of the whole block) fuses across the parts' boundaries, so it is timed as a whole
only and is the measured side of the fusion estimate.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.dtypes import torch_dtype
from rooflab.suite.lazy import F, torch
from rooflab.suite.ops.attention import KERNELS as ATTENTION_KERNELS
from rooflab.suite.ops.attention import _backend, _probe
from rooflab.suite.ops.base import BLOCK_RANGE, PART_RANGE_PREFIX, Params, ParamSpec, Prepared
from rooflab.suite.ops.common import TorchOp, as_torch, compare, fresh_compile, generator, randn, sample_indices
from rooflab.suite.ops.layer_model import (
    ACTIVATIONS,
    NORMS,
    PASSES,
    block_bytes_read,
    block_bytes_written,
    block_flops,
    block_parts,
    block_shape,
)
from rooflab.suite.ops.registry import register
from rooflab.vocab import TimingMode

KERNELS = tuple(k for k in ATTENTION_KERNELS if k != "naive")
CHECK_BATCHES = 2
NORM_EPS = 1e-5
# intermediates stored in the case's dtype on the longest path from x to y (n1, qkv, attention
# output, o, h1, n2, u, g, dn, y) and to dx (the same again, backwards)
ROUNDED_STAGES = {"forward": 10, "forward_backward": 20}


@dataclass(frozen=True)
class Weights:
    norm1_w: torch.Tensor
    norm1_b: torch.Tensor | None
    wqkv: torch.Tensor  # [H, 3H]
    wo: torch.Tensor  # [H, H]
    norm2_w: torch.Tensor
    norm2_b: torch.Tensor | None
    wup: torch.Tensor  # [H, F] or [H, 2F]
    wdown: torch.Tensor  # [F, H]

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.norm1_w, self.norm1_b, self.wqkv, self.wo, self.norm2_w, self.norm2_b, self.wup,
                            self.wdown) if t is not None]

    def double(self) -> Weights:
        def d(t: torch.Tensor) -> torch.Tensor:
            return t.detach().double()

        return Weights(
            d(self.norm1_w), None if self.norm1_b is None else d(self.norm1_b), d(self.wqkv), d(self.wo),
            d(self.norm2_w), None if self.norm2_b is None else d(self.norm2_b), d(self.wup), d(self.wdown),
        )


class BlockConfig(TypedDict):
    """The keyword arguments of `block` that a case's shape fixes."""

    heads: int
    norm: str
    activation: str


def _no_range(name: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def _part_range(name: str) -> contextlib.AbstractContextManager:
    return torch.profiler.record_function(PART_RANGE_PREFIX + name)


def _norm(x: torch.Tensor, kind: str, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    if kind == "rmsnorm":
        return F.rms_norm(x, (x.shape[-1],), w, eps=NORM_EPS)
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=NORM_EPS)


def block(
    x: torch.Tensor,
    w: Weights,
    *,
    heads: int,
    norm: str,
    activation: str,
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    mark: Callable[[str], contextlib.AbstractContextManager] = _no_range,
) -> torch.Tensor:
    """The block on x [batch, seq, hidden]; `mark(part)` is entered around each part."""
    b, s, h = x.shape
    d = h // heads
    x2 = x.reshape(b * s, h)
    with mark("norm1"):
        n1 = _norm(x2, norm, w.norm1_w, w.norm1_b)
    with mark("qkv"):
        qkv = n1 @ w.wqkv
    with mark("attention"):
        q, k, v = qkv.view(b, s, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
        a = attend(q, k, v).transpose(1, 2).reshape(b * s, h)
    with mark("out_proj"):
        o = a @ w.wo
    with mark("residual1"):
        h1 = x2 + o
    with mark("norm2"):
        n2 = _norm(h1, norm, w.norm2_w, w.norm2_b)
    with mark("mlp_up"):
        u = n2 @ w.wup
    with mark("activation"):
        if activation == "gelu":
            g = F.gelu(u)
        else:
            gate, up = u.chunk(2, dim=-1)
            g = F.silu(gate) * up
    with mark("mlp_down"):
        dn = g @ w.wdown
    with mark("residual2"):
        y = h1 + dn
    return y.view(b, s, h)


def _sdpa_attend(backend: Any) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    from torch.nn.attention import sdpa_kernel

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return attend


def _reference_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention written out, in float64."""
    seq = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


def _rounding_allowance(dtype: str, pass_: str) -> float:
    """Relative allowance (of the reference's RMS) for the block's rounded intermediates: each of
    the ROUNDED_STAGES stores a value with a relative error of at most u (the dtype's unit
    roundoff), independent between stages, so the output moves by about u·√stages of its scale;
    6σ of that. Zero for float32, whose own tolerance already exceeds it."""
    unit = {"bfloat16": 2.0**-8, "float16": 2.0**-11}.get(dtype, 0.0)
    return 6.0 * unit * math.sqrt(ROUNDED_STAGES[pass_])


class TransformerBlock(TorchOp):
    """See the module docstring (and suite.ops.layer_model for the counts)."""

    name = "transformer_block"
    family = "layer"
    params = {
        "batch": ParamSpec(int, 1, "sequences per call"),
        "seq": ParamSpec(int, 128, "sequence length (tokens per sequence)"),
        "hidden": ParamSpec(int, 256, "model width H (a multiple of heads)"),
        "heads": ParamSpec(int, 4, "attention heads (head_dim = hidden / heads)"),
        "mlp_ratio": ParamSpec(float, 4.0, "MLP width F = round(hidden·mlp_ratio)"),
        "norm": ParamSpec(str, "rmsnorm", "normalisation", choices=NORMS, positive=False),
        "activation": ParamSpec(str, "gelu", "MLP activation", choices=ACTIVATIONS, positive=False),
        "kernel": ParamSpec(str, "sdpa_math", "SDPA kernel", choices=KERNELS, positive=False),
        "pass": ParamSpec(str, "forward", "forward, or forward and backward", choices=PASSES, positive=False),
    }
    backends = ("eager", "compiled")
    dtypes = ("float32", "bfloat16")
    timing_modes = (TimingMode.LAUNCH,)

    def flops(self, params: Params, dtype: str) -> int:
        return block_flops(self.p(params), dtype)

    def bytes_read(self, params: Params, dtype: str) -> int:
        return block_bytes_read(self.p(params), dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        return block_bytes_written(self.p(params), dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        """Every tensor the parts move (the byte model, re-reads included: an over-estimate of
        what is alive at once, weights and saved activations of the backward among them), plus
        sdpa_math's float32 scores and probabilities [batch, heads, seq, seq]."""
        s = block_shape(self.p(params))
        scores = s.batch * s.heads * s.seq * s.seq * 4
        return self.bytes(params, dtype) + 2 * scores

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        p = self.p(case.params)
        hidden, heads = int(p["hidden"]), int(p["heads"])
        if hidden % heads:
            return f"hidden ({hidden}) must be a multiple of heads ({heads})"
        return _probe(str(p["kernel"]), device.torch_device, case.dtype, hidden // heads, True, 0)

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        p = self.p(case.params)
        s = block_shape(p)
        h, f = s.hidden, s.ffn
        gen = generator(device, seed)
        backward = s.pass_ == "forward_backward"

        def weight(rows: int, cols: int) -> torch.Tensor:
            return (randn((rows, cols), "float32", device, gen) / math.sqrt(rows)).to(torch_dtype(case.dtype))

        def vector() -> torch.Tensor:  # norm weights near 1, biases near 0
            return (1.0 + 0.1 * randn(h, "float32", device, gen)).to(torch_dtype(case.dtype))

        layer = s.norm == "layernorm"
        w = Weights(
            vector(), (vector() - 1.0) if layer else None, weight(h, 3 * h), weight(h, h),
            vector(), (vector() - 1.0) if layer else None, weight(h, s.up_width), weight(f, h),
        )
        x = randn((s.batch, s.seq, h), case.dtype, device, gen)
        grad_y = randn((s.batch, s.seq, h), case.dtype, device, gen) if backward else None
        if backward:
            for t in [x, *w.tensors()]:
                t.requires_grad_(True)
        attend = _sdpa_attend(_backend(str(p["kernel"])))
        config: BlockConfig = {"heads": s.heads, "norm": s.norm, "activation": s.activation}
        impl = fresh_compile(block) if case.backend == "compiled" else block

        def call(mark: Callable[[str], contextlib.AbstractContextManager]) -> Any:
            if case.backend == "compiled":
                y = impl(x, w, attend=attend, **config)
            else:
                y = impl(x, w, attend=attend, mark=mark, **config)
            if not backward:
                return y
            for t in [x, *w.tensors()]:
                t.grad = None
            with mark("backward"):
                y.backward(grad_y)
            return y.detach(), x.grad

        timed_mark, profiled_mark = self.marks(case, device)

        def fn() -> Any:
            return call(timed_mark)

        def profiled() -> Any:
            with torch.profiler.record_function(BLOCK_RANGE):
                return call(profiled_mark)

        check = self._check(x, w, grad_y, s, config, case.dtype, seed)
        return Prepared(
            fn=fn,
            check=check,
            graph_safe=False,
            profiled=profiled if case.backend == "eager" else None,
            part_models=block_parts(p, case.dtype) if case.backend == "eager" else (),
        )

    def marks(self, case: Case, device: DeviceInfo) -> tuple[Callable[[str], Any], Callable[[str], Any]]:
        """(mark of the timed call, mark of the profiled call): what is entered around each part;
        nothing when timed, a named profiler range when profiled. A subclass may add work to a part."""
        return _no_range, _part_range

    @staticmethod
    def _check(x: torch.Tensor, w: Weights, grad_y: torch.Tensor | None, s: Any, config: BlockConfig, dtype: str,
               seed: int) -> Callable[[Any], str | None]:
        w64 = w.double()
        accumulation = max(s.hidden, s.ffn, s.seq)
        relative = _rounding_allowance(dtype, s.pass_)

        def check(output: Any) -> str | None:
            y, dx = (output if isinstance(output, tuple) else (output, None))
            y = as_torch(y)
            if tuple(y.shape) != (s.batch, s.seq, s.hidden):
                return f"output has shape {tuple(y.shape)}, expected {(s.batch, s.seq, s.hidden)}"
            if grad_y is not None and (dx is None or tuple(dx.shape) != tuple(x.shape)):
                return "forward_backward returned no gradient of x of x's shape"
            for bi in sample_indices(s.batch, CHECK_BATCHES, seed).tolist():
                x64 = x[bi:bi + 1].detach().double().requires_grad_(grad_y is not None)
                ref = block(x64, w64, attend=_reference_attend, **config)
                pairs = [("output", y[bi:bi + 1], ref.detach())]
                if grad_y is not None:
                    (ref_dx,) = torch.autograd.grad(ref, x64, grad_y[bi:bi + 1].double())
                    pairs.append(("gradient of x", dx[bi:bi + 1], ref_dx))
                for what, got, want in pairs:
                    scale = float(want.square().mean().sqrt())
                    allowance = torch.full_like(want, relative * scale)
                    message = compare(got.detach(), want, dtype, accumulation, f"{what} of batch {bi}", allowance)
                    if message:
                        return message
            return None

        return check


register(TransformerBlock)
