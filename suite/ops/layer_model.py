"""The work model of a pre-norm transformer block, part by part (pure functions).

The block, with T = batch·seq tokens, H = hidden, F = round(hidden·mlp_ratio), d = H / heads:

    norm1       n1  = norm(x)                      rmsnorm or layernorm op model, rows T, cols H
    qkv         qkv = n1 @ Wqkv  [H, 3H]           matmul op model m T, k H, n 3H
    attention   a   = sdpa(q, k, v, causal)        attention op model (causal, seq_q = seq_k = seq)
                      + the head merge a[b,h,s,d] -> [T, H] (copy op model, n T·H)
    out_proj    o   = a @ Wo     [H, H]            matmul
    residual1   h1  = x + o                        add op model, n T·H
    norm2       n2  = norm(h1)
    mlp_up      u   = n2 @ Wup   [H, F] (GELU) or [H, 2F] (SwiGLU: gate and up in one matmul)
    activation  g   = gelu(u) (gelu op model) or silu(u_gate)·u_up (5 FLOPs per output element:
                      sigmoid 3, two multiplies; bytes 3·T·F·s: two inputs, one output)
    mlp_down    dn  = g @ Wdown  [F, H]            matmul
    residual2   y   = h1 + dn                      add

No biases on the projections (as in current decoder LLMs). Every part's FLOPs and bytes (read and
written apart) are the op library's own models at the part's shape (`part_ops`), so the block's
FLOPs are the sum of: 2·(weight
parameters)·T for the four projections (4·H² + 2·H·F, or 4·H² + 3·H·F with SwiGLU), the causal
attention term 2·batch·seq²·H (the two attention matmuls, halved by the mask; softmax not counted,
as the attention op does), and the per-element counts of the norms (4 or 8 per element), the
activation (GELU 5, SwiGLU 5 per output element) and the two residual adds (1 per element).

Backward (pass forward_backward), per part: a matmul's backward is two GEMMs (dX = dY·Wᵀ and
dW = Xᵀ·dY), so 2× its FLOPs and 2× its bytes: it reads the forward's inputs and the output
gradient twice (one GEMM each) and writes the inputs' gradients (read = forward read + 2·forward
written, written = forward read); attention's backward counts 2.5× the forward FLOPs
(FlashAttention's convention: five matmuls against two) and 2× its bytes (Q, K, V, O, dO read,
dQ, dK, dV written, and the head merge's gradient copy), split by the matmul's rule; a
memory-bound part's backward is counted as 2× its FLOPs and its forward bytes plus one more tensor
of its output's size (it reads its forward inputs and the output gradient and writes the input
gradients: read = forward read + that tensor, written = forward written). These backward figures
are approximations of the minimum, stated so that a reader can redo them.

Fusion chains: the memory-bound parts between two matmul (or attention) parts are a chain. A
fused kernel for a chain reads each tensor that enters the chain once and writes only the tensors
that a later part (outside the chain) or the block's output needs; the bytes saved are the
chain's unfused bytes less that. No fusion into a matmul's prologue or epilogue is assumed (what
torch.compile does with library GEMMs by default), so a chain of one part saves nothing.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rooflab.suite.dtypes import element_size
from rooflab.suite.ops.base import byte_split
from rooflab.suite.ops.registry import get_op

NORMS = ("rmsnorm", "layernorm")
ACTIVATIONS = ("gelu", "swiglu")
PASSES = ("forward", "forward_backward")
SWIGLU_FLOPS_PER_ELEMENT = 5  # silu = x·sigmoid(x): sigmoid 3 (exp, add, divide) + multiply 1; times up: 1
BACKWARD_PART = "backward"
# attribution: |sum(parts) + unattributed + gap - whole| / whole may be at most this
PARTS_SUM_TOLERANCE = 0.02


class PartKind(StrEnum):
    MATMUL = "matmul"
    ATTENTION = "attention"
    MEMORY = "memory"  # norms, activation, residual adds: bandwidth-bound
    BACKWARD = "backward"  # the whole backward pass, as one part


@dataclass(frozen=True)
class BlockShape:
    batch: int
    seq: int
    hidden: int
    heads: int
    ffn: int  # F = round(hidden·mlp_ratio)
    norm: str
    activation: str
    pass_: str

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def up_width(self) -> int:
        """Output columns of mlp_up: F, or 2F with SwiGLU (gate and up projections side by side)."""
        return 2 * self.ffn if self.activation == "swiglu" else self.ffn


def block_shape(params: Mapping[str, Any]) -> BlockShape:
    hidden = int(params["hidden"])
    return BlockShape(
        batch=int(params["batch"]),
        seq=int(params["seq"]),
        hidden=hidden,
        heads=int(params["heads"]),
        ffn=max(1, int(round(hidden * float(params["mlp_ratio"])))),
        norm=str(params["norm"]),
        activation=str(params["activation"]),
        pass_=str(params["pass"]),
    )


@dataclass(frozen=True)
class PartModel:
    """One part of the block: its FLOPs and minimum bytes, and the tensors it reads and writes
    (name -> elements) for the fusion estimate."""

    name: str
    kind: PartKind
    flops: int
    bytes: int
    reads: tuple[tuple[str, int], ...] = ()
    writes: tuple[tuple[str, int], ...] = ()
    # of `bytes`, those read and those written (None: not split)
    bytes_read: int | None = None
    bytes_written: int | None = None

    def __post_init__(self) -> None:
        if (self.bytes_read is None) != (self.bytes_written is None):
            raise ValueError(f"part {self.name}: give both bytes_read and bytes_written, or neither")
        if self.bytes_read is not None and self.bytes_read + (self.bytes_written or 0) != self.bytes:
            raise ValueError(f"part {self.name}: bytes_read + bytes_written must be bytes ({self.bytes})")


@dataclass(frozen=True)
class Work:
    """FLOPs and bytes read and written of one part (or a sum of parts)."""

    flops: int
    read: int
    written: int

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.read + other.read, self.written + other.written)

    def part(self, name: str, kind: PartKind, reads: tuple[tuple[str, int], ...] = (),
             writes: tuple[tuple[str, int], ...] = ()) -> PartModel:
        return PartModel(name, kind, self.flops, self.read + self.written, reads, writes, self.read, self.written)


def part_ops(params: Mapping[str, Any]) -> dict[str, tuple[tuple[str, dict[str, Any]], ...]]:
    """The op library's ops (name, params) whose models make up each forward part that has them (every
    part but a SwiGLU activation, whose model is its own: module docstring)."""
    s = block_shape(params)
    t, h, f, up = s.tokens, s.hidden, s.ffn, s.up_width
    norm = ((s.norm, {"rows": t, "cols": h}),)
    attention = {"batch": s.batch, "heads": s.heads, "seq_q": s.seq, "seq_k": s.seq, "head_dim": s.head_dim,
                 "causal": True}
    out = {
        "norm1": norm, "qkv": (("matmul", {"m": t, "k": h, "n": 3 * h}),),
        "attention": (("attention", attention), ("copy", {"n": t * h})),
        "out_proj": (("matmul", {"m": t, "k": h, "n": h}),), "residual1": (("add", {"n": t * h}),),
        "norm2": norm, "mlp_up": (("matmul", {"m": t, "k": h, "n": up}),),
        "mlp_down": (("matmul", {"m": t, "k": f, "n": h}),), "residual2": (("add", {"n": t * h}),),
    }
    if s.activation == "gelu":
        out["activation"] = (("gelu", {"n": t * f}),)
    return out


def _op_work(op_name: str, params: Mapping[str, Any], dtype: str) -> Work:
    op = get_op(op_name)
    resolved = op.resolved_params(params)
    split = byte_split(op, resolved, dtype)
    if split is None:
        raise TypeError(f"op {op_name} has no bytes read and written apart: it cannot be a part of the block")
    return Work(int(op.flops(resolved, dtype)), *split)


def _ops_work(ops: tuple[tuple[str, dict[str, Any]], ...], dtype: str) -> Work:
    total = Work(0, 0, 0)
    for name, op_params in ops:
        total = total + _op_work(name, op_params, dtype)
    return total


def forward_parts(params: Mapping[str, Any], dtype: str) -> tuple[PartModel, ...]:
    """The ten forward parts, in execution order (see the module docstring)."""
    s = block_shape(params)
    t, h, f, up = s.tokens, s.hidden, s.ffn, s.up_width
    vectors = ("w",) if s.norm == "rmsnorm" else ("w", "b")  # weight (and bias) of each norm
    ops = part_ops(params)

    def work(name: str) -> Work:
        return _ops_work(ops[name], dtype)

    def norm(name: str, src: str, dst: str) -> PartModel:
        reads = ((src, t * h),) + tuple((f"{v}_{name}", h) for v in vectors)
        return work(name).part(name, PartKind.MEMORY, reads, ((dst, t * h),))

    def matmul(name: str, src: str, k: int, n: int, dst: str) -> PartModel:
        return work(name).part(name, PartKind.MATMUL, ((src, t * k), (f"W_{name}", k * n)), ((dst, t * n),))

    def add(name: str, a: str, b: str, dst: str) -> PartModel:
        return work(name).part(name, PartKind.MEMORY, ((a, t * h), (b, t * h)), ((dst, t * h),))

    if s.activation == "gelu":
        act = work("activation")
    else:  # two inputs (gate and up, side by side in u), one output
        es = element_size(dtype)
        act = Work(SWIGLU_FLOPS_PER_ELEMENT * t * f, 2 * t * f * es, t * f * es)
    return (
        norm("norm1", "x", "n1"),
        matmul("qkv", "n1", h, 3 * h, "qkv"),
        work("attention").part("attention", PartKind.ATTENTION, (("qkv", 3 * t * h),), (("a", t * h),)),
        matmul("out_proj", "a", h, h, "o"),
        add("residual1", "x", "o", "h1"),
        norm("norm2", "h1", "n2"),
        matmul("mlp_up", "n2", h, up, "u"),
        act.part("activation", PartKind.MEMORY, (("u", t * up),), (("g", t * f),)),
        matmul("mlp_down", "g", f, h, "dn"),
        add("residual2", "h1", "dn", "y"),
    )


def backward_model(part: PartModel, dtype: str) -> Work:
    """FLOPs and bytes read and written of one part's backward, by the rules in the module docstring."""
    read, written = int(part.bytes_read or 0), int(part.bytes_written or 0)
    if part.kind in (PartKind.MATMUL, PartKind.ATTENTION):
        # the forward's inputs and the output gradient (twice: one GEMM each) read, the input gradients written
        flops = 2 * part.flops if part.kind == PartKind.MATMUL else part.flops * 5 // 2
        return Work(flops, read + 2 * written, read)
    out_bytes = sum(n for _, n in part.writes) * element_size(dtype)
    return Work(2 * part.flops, read + out_bytes, written)


def block_parts(params: Mapping[str, Any], dtype: str) -> tuple[PartModel, ...]:
    """The parts attribution splits the block into: the forward parts, plus (forward_backward)
    one `backward` part holding the summed backward model of every part."""
    fwd = forward_parts(params, dtype)
    if block_shape(params).pass_ != "forward_backward":
        return fwd
    total = Work(0, 0, 0)
    for part in fwd:
        total = total + backward_model(part, dtype)
    return fwd + (total.part(BACKWARD_PART, PartKind.BACKWARD),)


def block_flops(params: Mapping[str, Any], dtype: str) -> int:
    return sum(p.flops for p in block_parts(params, dtype))


def block_bytes_read(params: Mapping[str, Any], dtype: str) -> int:
    return sum(int(p.bytes_read or 0) for p in block_parts(params, dtype))


def block_bytes_written(params: Mapping[str, Any], dtype: str) -> int:
    return sum(int(p.bytes_written or 0) for p in block_parts(params, dtype))


@dataclass(frozen=True)
class FusionChain:
    """Consecutive memory-bound parts between two matmul/attention parts."""

    parts: tuple[str, ...]
    unfused_bytes: int
    fused_bytes: int

    @property
    def saved_bytes(self) -> int:
        return self.unfused_bytes - self.fused_bytes


def fusion_chains(parts: tuple[PartModel, ...], dtype: str) -> tuple[FusionChain, ...]:
    """Each maximal run of MEMORY parts of the forward pass, with the bytes a fused kernel moves."""
    fwd = [p for p in parts if p.kind != PartKind.BACKWARD]
    s = element_size(dtype)
    runs: list[list[int]] = []
    for i, p in enumerate(fwd):
        if p.kind != PartKind.MEMORY:
            continue
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    out = []
    for run in runs:
        inside = [fwd[i] for i in run]
        written = {name for p in inside for name, _ in p.writes}
        reads = {name: n for p in inside for name, n in p.reads if name not in written}
        needed_later = {name for p in fwd[run[-1] + 1:] for name, _ in p.reads}
        last = run[-1] == len(fwd) - 1
        writes = {
            name: n for i in run for name, n in fwd[i].writes
            if name in needed_later or (last and i == run[-1])  # the block's output is always written
        }
        fused = (sum(reads.values()) + sum(writes.values())) * s
        out.append(FusionChain(tuple(p.name for p in inside), sum(p.bytes for p in inside), fused))
    return tuple(out)
