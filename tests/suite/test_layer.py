"""transformer_block: the FLOP/byte model against a hand count, the fusion chains, the check."""
from __future__ import annotations

import pytest
import torch

from rooflab.suite.case import Case, ParamValue
from rooflab.suite.ops import layer as layer_mod
from rooflab.suite.ops.layer_model import PartKind, block_parts, forward_parts, fusion_chains
from rooflab.suite.ops.registry import get_op
from tests.suite.devices import CPU

HAND = {"batch": 2, "seq": 64, "hidden": 128, "heads": 4}  # T = 128 tokens, H = 128, F = 512, d = 32


def layer_case(dtype: str = "float32", backend: str = "eager", **params) -> Case:
    return Case("transformer_block", 1, "layer", backend, dtype, "cold", "launch", {**HAND, **params})


def test_flop_model_matches_a_hand_count() -> None:
    op = get_op("transformer_block")
    t, h, f = 128, 128, 512
    projections = 2 * t * (3 * h * h + h * h + h * f + f * h)  # 2 · weight parameters · tokens
    attention = 2 * 2 * 4 * 64 * 64 * 32  # 4·b·heads·seq²·d, halved by the causal mask
    norms = 2 * 4 * t * h  # rmsnorm: 4 per element, twice
    gelu = 5 * t * f
    residuals = 2 * t * h
    assert op.flops(HAND, "float32") == projections + attention + norms + gelu + residuals == 52_920_320
    # layernorm (8 per element) and SwiGLU (gate and up side by side, 5 per output element)
    swiglu: dict[str, ParamValue] = {**HAND, "norm": "layernorm", "activation": "swiglu"}
    projections_swiglu = 2 * t * (3 * h * h + h * h + h * 2 * f + f * h)
    assert op.flops(swiglu, "float32") == projections_swiglu + attention + 2 * 8 * t * h + 5 * t * f + residuals


def test_byte_model_matches_a_hand_count() -> None:
    op = get_op("transformer_block")
    t, h, f, s = 128, 128, 512, 2
    norm = 2 * t * h + h  # x read, y written, weight read
    mm = lambda m, k, n: m * k + k * n + m * n  # noqa: E731 - a named one-line lambda
    attention = 4 * t * h + 2 * t * h  # q, k, v read, o written; the head merge copy
    expected = (2 * norm + mm(t, h, 3 * h) + mm(t, h, h) + mm(t, h, f) + mm(t, f, h) + attention + 2 * t * f
                + 2 * 3 * t * h) * s
    assert op.bytes(HAND, "bfloat16") == expected


def test_forward_backward_counts_three_times_the_matmuls_and_the_attention_convention() -> None:
    fwd = forward_parts(get_op("transformer_block").resolved_params(HAND), "float32")
    both = block_parts(get_op("transformer_block").resolved_params({**HAND, "pass": "forward_backward"}), "float32")
    assert [p.name for p in both] == [p.name for p in fwd] + ["backward"]
    mm = sum(p.flops for p in fwd if p.kind == PartKind.MATMUL)
    attn = sum(p.flops for p in fwd if p.kind == PartKind.ATTENTION)
    mem = sum(p.flops for p in fwd if p.kind == PartKind.MEMORY)
    assert both[-1].flops == 2 * mm + attn * 5 // 2 + 2 * mem


def test_memory_parts_tensors_add_up_to_their_op_models() -> None:
    for dtype, s in (("float32", 4), ("bfloat16", 2)):
        for part in forward_parts(get_op("transformer_block").resolved_params(HAND), dtype):
            if part.kind == PartKind.MEMORY:
                assert part.bytes == (sum(n for _, n in part.reads) + sum(n for _, n in part.writes)) * s, part.name


def test_fusion_chains_lie_between_matmuls_and_save_the_intermediate_reads() -> None:
    parts = forward_parts(get_op("transformer_block").resolved_params(HAND), "bfloat16")
    chains = fusion_chains(parts, "bfloat16")
    assert [c.parts for c in chains] == [("norm1",), ("residual1", "norm2"), ("activation",), ("residual2",)]
    # residual1 + norm2 fused: h1 is still written (residual2 reads it) but not read back by norm2
    assert [c.saved_bytes for c in chains] == [0, 128 * 128 * 2, 0, 0]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("extra", [{}, {"pass": "forward_backward", "norm": "layernorm", "activation": "swiglu"}])
def test_the_block_passes_its_check_and_a_wrong_block_fails_it(dtype: str, extra: dict, monkeypatch) -> None:
    op = get_op("transformer_block")
    case = layer_case(dtype, **extra)
    assert op.skip_reason(case, CPU) is None
    prepared = op.prepare(case, CPU, seed=11)
    assert prepared.check(prepared.fn()) is None
    # planted: attention that ignores the causal mask (a future token leaks into every position)
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, k, v, is_causal=False: real(q, k, v, is_causal=False))
    wrong = op.prepare(case, CPU, seed=11)
    message = wrong.check(wrong.fn())
    assert message is not None and "outside tolerance" in message


def test_a_part_off_by_a_little_is_caught() -> None:
    op = get_op("transformer_block")
    prepared = op.prepare(layer_case("bfloat16"), CPU, seed=5)
    out = prepared.fn()
    assert prepared.check(out) is None
    assert prepared.check(out * 1.05) is not None  # 5 %: beyond bfloat16's allowance


def test_hidden_must_be_a_multiple_of_heads_and_eager_has_a_profiled_call() -> None:
    op = get_op("transformer_block")
    reason = op.skip_reason(layer_case(heads=5), CPU)
    assert reason is not None and "multiple of heads" in reason
    assert op.prepare(layer_case(), CPU, seed=1).profiled is not None
    assert layer_mod.TransformerBlock.family == "layer"
    # the compiled form has none: tests/suite/test_ops_compiled.py
