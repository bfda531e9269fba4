"""Attention forward: O = softmax(Q·Kᵀ/√d [+ causal mask])·V with Q [batch, heads, seq_q, d] and
K, V [batch, heads, seq_k, d].

FLOPs 4·batch·heads·seq_q·seq_k·head_dim (the two matmuls), halved when causal and seq_q = seq_k;
softmax and scaling are not counted (FlashAttention's benchmark convention). With causal and
seq_q != seq_k the full count is kept (the mask is top-left aligned, as torch's is_causal is).
Elementary functions: one exp per score, batch·heads·seq_q·seq_k, halved as the FLOPs are (a fused
kernel skips the masked half; the naive kernel takes exp of it too, as -inf). Bytes
(2·seq_q + 2·seq_k)·batch·heads·head_dim·s: Q, K, V read once, O written once, for every kernel. This is the
minimum-bytes convention of docs/design.md: the naive kernel's extra traffic for the score matrix
(written, read and rewritten by softmax, read by the second matmul) is not counted in `bytes`, so on
a roofline the naive kernel shows up as further below the same ceiling rather than at a different
intensity; its memory estimate does count the scores.

Of those bytes, Q, K and V are read ((seq_q + 2·seq_k)·batch·heads·head_dim·s) and O is written
(seq_q·batch·heads·head_dim·s).

Kernels: sdpa_flash, sdpa_efficient, sdpa_cudnn, sdpa_math run
torch.nn.functional.scaled_dot_product_attention restricted to one backend with
torch.nn.attention.sdpa_kernel; each is skipped with torch's reason where that backend cannot
run the case (probed once on a small case of the same dtype, head_dim and causality). naive
materialises the scores: matmul, softmax, matmul (eager, or compiled).

The check compares up to 32 sampled query rows of up to 4 (batch, head) pairs with a float64
reference computed on the device from the same inputs.
"""
from __future__ import annotations

import functools
import math
import warnings
from typing import Any

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
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
    sample_indices,
)
from rooflab.suite.ops.registry import register
from rooflab.vocab import DeviceKind, ElementaryFunction, device_kind_of

KERNELS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math", "naive")
CHECK_PAIRS = 4
CHECK_ROWS = 32
SCORE_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}  # unit roundoff of 16-bit scores (naive)


def _backend(kernel: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {
        "sdpa_flash": SDPBackend.FLASH_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa_math": SDPBackend.MATH,
    }[kernel]


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: Any, causal: bool) -> torch.Tensor:
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def _reference(
    q64: torch.Tensor,
    k64: torch.Tensor,
    v64: torch.Tensor,
    rows: torch.Tensor,
    causal: bool,
    score_roundoff: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """float64 attention of the query rows `rows` of one (batch, head): q64 [r, d], k64/v64 [s, d].

    With `score_roundoff` > 0 (the unit roundoff of a kernel that stores the scores in a 16-bit
    dtype: naive), also the per-element allowance for that rounding: the scores are rounded twice
    (Q·Kᵀ, then the scaled product), each a relative error of at most u, uniform, so score j of a
    row moves by δ_j with σ(δ_j) = u·|s_j|·√(2/3), and output element (r, c) by
    Σ_j p_rj·δ_j·(v_jc - o_rc) to first order. The allowance is 6σ of that sum.
    """
    scores = (q64 @ k64.T) / math.sqrt(q64.shape[-1])
    if causal:
        keys = torch.arange(k64.shape[0], device=q64.device)
        scores = scores.masked_fill(keys.unsqueeze(0) > rows.unsqueeze(1), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = probs @ v64
    if not score_roundoff > 0:
        return out, None
    weights = (probs * torch.nan_to_num(scores, neginf=0.0)).square()  # (p_j·s_j)², 0 where masked
    variance = weights @ v64.square() - 2.0 * out * (weights @ v64) + out.square() * weights.sum(-1, keepdim=True)
    sigma = score_roundoff * math.sqrt(2.0 / 3.0) * variance.clamp_min(0.0).sqrt()
    return out, 6.0 * sigma


@functools.lru_cache(maxsize=256)
def _probe(kernel: str, torch_device: str, dtype: str, head_dim: int, causal: bool, seq_relation: int) -> str | None:
    """Run the SDPA backend once on a small case like the real one; None if it works, else why not.

    A backend that cannot run makes torch warn why (one UserWarning per kernel it passed over, e.g.
    "Flash attention does not support ...") before it raises "No available kernel": those reasons go
    into the answer instead of escaping as warnings; the warnings of a backend that runs are let through."""
    seq_q = 64
    seq_k = 64 + 16 * seq_relation  # keep seq_k <, = or > seq_q as in the real case
    gen = torch.Generator(device=torch_device).manual_seed(0)

    def make(seq: int) -> torch.Tensor:
        t = torch.randn((1, 2, seq, head_dim), generator=gen, device=torch_device)
        return t.to(getattr(torch, dtype))

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            out = _sdpa(make(seq_q), make(seq_k), make(seq_k), _backend(kernel), causal)
            if device_kind_of(torch_device) is DeviceKind.CUDA:
                torch.cuda.synchronize()
            del out
        except Exception as exc:  # torch explains in the message (and the warnings) why the backend cannot run
            why = "; ".join(" ".join(str(w.message).split()) for w in said)
            text = " ".join(str(exc).split()) + (f" ({why})" if why else "")
            return f"{kernel} cannot run {dtype}, head_dim {head_dim}, causal={causal} on {torch_device}: {text[:600]}"
    for w in said:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return None


class Attention(TorchOp):
    """See the module docstring for the kernels, counts and check."""

    name = "attention"
    family = "attention"
    params = {
        "batch": ParamSpec(int, 4, "batch size"),
        "heads": ParamSpec(int, 16, "attention heads"),
        "seq_q": ParamSpec(int, 1024, "query length"),
        "seq_k": ParamSpec(int, 1024, "key/value length"),
        "head_dim": ParamSpec(int, 64, "head dimension"),
        "causal": ParamSpec(bool, False, "causal mask (top-left aligned)", positive=False),
        "kernel": ParamSpec(str, "sdpa_math", "implementation", choices=KERNELS, positive=False),
        "compile_mode": COMPILE_MODE_PARAM,
    }
    backends = ("eager", "compiled")
    dtypes = ("float32", "float16", "bfloat16")

    def flops(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        full = 4 * int(p["batch"]) * int(p["heads"]) * int(p["seq_q"]) * int(p["seq_k"]) * int(p["head_dim"])
        if bool(p["causal"]) and int(p["seq_q"]) == int(p["seq_k"]):
            return full // 2
        return full

    def elementary(self, params: Params, dtype: str) -> dict[ElementaryFunction, int]:
        p = self.p(params)
        scores = int(p["batch"]) * int(p["heads"]) * int(p["seq_q"]) * int(p["seq_k"])
        if bool(p["causal"]) and int(p["seq_q"]) == int(p["seq_k"]):
            scores //= 2
        return {ElementaryFunction.EXP: scores}

    def bytes_read(self, params: Params, dtype: str) -> int:
        """Q, K and V: (seq_q + 2·seq_k)·batch·heads·head_dim·s."""
        p = self.p(params)
        per_head = (int(p["seq_q"]) + 2 * int(p["seq_k"])) * int(p["head_dim"])
        return per_head * int(p["batch"]) * int(p["heads"]) * esize(dtype)

    def bytes_written(self, params: Params, dtype: str) -> int:
        """O: seq_q·batch·heads·head_dim·s."""
        p = self.p(params)
        return int(p["seq_q"]) * int(p["head_dim"]) * int(p["batch"]) * int(p["heads"]) * esize(dtype)

    def unfused_bytes(self, params: Params, dtype: str) -> int:
        """Naive attention kernel by kernel: QK^T reads Q, K and writes S; softmax reads S, writes P;
        PV reads P, V and writes O -> (2·seq_q + 2·seq_k)·b·h·d·s + 4·b·h·seq_q·seq_k·s."""
        p = self.p(params)
        b, h = int(p["batch"]), int(p["heads"])
        sq, sk, d = int(p["seq_q"]), int(p["seq_k"]), int(p["head_dim"])
        return ((2 * sq + 2 * sk) * b * h * d + 4 * b * h * sq * sk) * esize(dtype)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        p = self.p(params)
        b, h, sq, sk = int(p["batch"]), int(p["heads"]), int(p["seq_q"]), int(p["seq_k"])
        io = self.bytes(params, dtype)
        if p["kernel"] == "naive":
            # scores, scaled/masked scores and probabilities: three [b, h, sq, sk] tensors (+ a mask)
            return io + 3 * b * h * sq * sk * esize(dtype) + sq * sk
        if p["kernel"] == "sdpa_math":
            # torch's math backend computes 16-bit inputs in float32: float32 copies of Q, K, V and
            # O, then scores and probabilities as float32 [b, h, sq, sk] tensors (three counted, as
            # for naive); causal adds a boolean mask and its float32 additive form [sq, sk]
            upcast = io // esize(dtype) * 4 if esize(dtype) < 4 else 0
            return io + upcast + 3 * b * h * sq * sk * 4 + sq * sk * 5
        return io + b * h * sq * 4  # fused kernels keep per-row statistics (logsumexp) in float32

    def extra_skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        p = self.p(case.params)
        kernel = str(p["kernel"])
        if kernel not in KERNELS:
            return f"unknown attention kernel {kernel!r} (allowed: {', '.join(KERNELS)})"
        if case.backend == "compiled" and kernel != "naive":
            return "the compiled backend applies to kernel=naive only (SDPA kernels are already fused)"
        if kernel == "naive":
            return None
        sq, sk = int(p["seq_q"]), int(p["seq_k"])
        relation = (sk > sq) - (sk < sq)
        return _probe(kernel, device.torch_device, case.dtype, int(p["head_dim"]), bool(p["causal"]), relation)

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        p = self.p(case.params)
        b, h, sq, sk, d = (int(p[name]) for name in ("batch", "heads", "seq_q", "seq_k", "head_dim"))
        causal, kernel = bool(p["causal"]), str(p["kernel"])
        gen = generator(device, seed)
        q = randn((b, h, sq, d), case.dtype, device, gen)
        k = randn((b, h, sk, d), case.dtype, device, gen)
        v = randn((b, h, sk, d), case.dtype, device, gen)
        if kernel == "naive":
            impl = fresh_compile(_naive, str(p["compile_mode"])) if case.backend == "compiled" else _naive
            fn = lambda: impl(q, k, v, causal)  # noqa: E731 - the timed callable, one line per backend
        else:
            backend = _backend(kernel)
            fn = lambda: _sdpa(q, k, v, backend, causal)  # noqa: E731 - the timed callable, one line per backend

        # naive stores the scores in the case's dtype: a 16-bit rounding that the fused kernels
        # (float32 scores) and sdpa_math (which computes 16-bit inputs in float32) do not have
        score_roundoff = SCORE_ROUNDOFF.get(case.dtype, 0.0) if kernel == "naive" else 0.0

        def check(output: Any) -> str | None:
            out = as_torch(output)
            if tuple(out.shape) != (b, h, sq, d):
                return f"output has shape {tuple(out.shape)}, expected {(b, h, sq, d)}"
            pairs = sample_indices(b * h, CHECK_PAIRS, seed)
            for pair in pairs.tolist():
                bi, hi = divmod(pair, h)
                rows = sample_indices(sq, CHECK_ROWS, seed + pair).to(q.device)
                ref, allowance = _reference(
                    q[bi, hi].index_select(0, rows).double(), k[bi, hi].double(), v[bi, hi].double(), rows, causal,
                    score_roundoff,
                )
                message = compare(
                    out[bi, hi].index_select(0, rows), ref, case.dtype, accumulation=sk, what=f"batch {bi} head {hi}",
                    extra_atol=allowance,
                )
                if message:
                    return f"{message} (checked {rows.numel()} sampled query rows)"
            return None

        return Prepared(fn=fn, check=check)


register(Attention)
