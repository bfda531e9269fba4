"""FLOP and byte models of every op against hand-computed values (the table of docs/design.md and the
conventions the ops document)."""
from __future__ import annotations

import pytest

from rooflab.suite.case import ParamValue
from rooflab.suite.ops.collective import CollectiveOp
from rooflab.suite.ops.registry import builtin_ops, get_op

# (op, params, dtype, flops, bytes), each worked out by hand
CASES: list[tuple[str, dict[str, ParamValue], str, int, int]] = [
    # pointwise: copy 0 / 2ns, scale n / 2ns, add n / 3ns, triad 2n / 3ns
    ("copy", {"n": 10}, "float32", 0, 2 * 10 * 4),
    ("scale", {"n": 10}, "float16", 10, 2 * 10 * 2),
    ("add", {"n": 10}, "float32", 10, 3 * 10 * 4),
    ("triad", {"n": 10}, "float64", 20, 3 * 10 * 8),
    ("gelu", {"n": 10}, "float32", 50, 80),
    ("cos_cos", {"n": 10}, "bfloat16", 20, 40),
    ("bias_gelu_dropout_residual", {"n": 8, "hidden": 4, "p": 0.1}, "float16", 64, (3 * 8 + 4) * 2),
    # reductions over [3, 5]
    ("sum", {"rows": 3, "cols": 5}, "float32", 15, (15 + 3) * 4),
    ("amax", {"rows": 3, "cols": 5}, "float32", 15, (15 + 3) * 4),
    ("softmax", {"rows": 3, "cols": 5}, "float32", 75, 2 * 15 * 4),
    ("layernorm", {"rows": 3, "cols": 5}, "float32", 120, (30 + 10) * 4),
    ("rmsnorm", {"rows": 3, "cols": 5}, "bfloat16", 60, (30 + 5) * 2),
    # GEMM m=2, n=3, k=4: 2·2·3·4 = 48 FLOPs, (8 + 12 + 6)·s bytes
    ("matmul", {"m": 2, "n": 3, "k": 4}, "float32", 48, 26 * 4),
    ("matmul", {"m": 2, "n": 3, "k": 4}, "tf32", 48, 26 * 4),
    ("matmul", {"m": 2, "n": 3, "k": 4}, "bfloat16", 48, 26 * 2),
    ("matmul", {"m": 2, "n": 3, "k": 4, "batch": 5}, "float16", 240, 5 * 26 * 2),
    # float8: 1-byte operands, bfloat16 output
    ("matmul", {"m": 2, "n": 3, "k": 4}, "float8_e4m3fn", 48, (8 + 12) * 1 + 6 * 2),
    ("matmul_bias_gelu", {"m": 2, "n": 3, "k": 4}, "float32", 48 + 6 * 6, (8 + 12 + 6 + 3) * 4),
    # attention b=2, h=3, d=8
    ("attention", {"batch": 2, "heads": 3, "seq_q": 5, "seq_k": 7, "head_dim": 8, "causal": False, "kernel": "naive"},
     "float16", 4 * 2 * 3 * 5 * 7 * 8, (2 * 5 + 2 * 7) * 2 * 3 * 8 * 2),
    # causal with seq_q != seq_k keeps the full count
    ("attention",
     {"batch": 2, "heads": 3, "seq_q": 5, "seq_k": 7, "head_dim": 8, "causal": True, "kernel": "sdpa_flash"},
     "float16", 6720, 2304),
    ("attention",
     {"batch": 2, "heads": 3, "seq_q": 5, "seq_k": 5, "head_dim": 8, "causal": True, "kernel": "sdpa_math"},
     "float32", 4 * 2 * 3 * 5 * 5 * 8 // 2, (10 + 10) * 2 * 3 * 8 * 4),
    ("attention",
     {"batch": 2, "heads": 3, "seq_q": 5, "seq_k": 5, "head_dim": 8, "causal": False, "kernel": "sdpa_math"},
     "float32", 4800, 3840),
    ("launch", {"n": 3}, "float32", 3, 24),
    # transformer block T=2 tokens, H=4, F=8, 2 heads: norms 2·4TH, qkv 2·T·H·3H, causal attention
    # 4·b·h·s²·d/2, out 2·T·H², residuals 2·TH, up 2·T·H·F, gelu 5·T·F, down 2·T·F·H; bytes: norms
    # 2·(2TH + H), qkv (TH + 3H² + 3TH), attention (4TH) + head merge copy (2TH), out (2TH + H²),
    # residuals 2·3TH, up (TH + HF + TF), gelu 2TF, down (TF + FH + TH); all ·4
    ("transformer_block", {"batch": 1, "seq": 2, "hidden": 4, "heads": 2, "mlp_ratio": 2.0}, "float32",
     64 + 192 + 32 + 64 + 16 + 128 + 80 + 128, (40 + 80 + 48 + 32 + 48 + 56 + 32 + 56) * 4),
    # probes: BabelStream weights 2, 2, 3, 3, 2; the fill 1
    ("stream_copy", {"n": 10}, "float64", 0, 160),
    ("stream_scale", {"n": 10}, "float64", 10, 160),
    ("stream_add", {"n": 10}, "float64", 10, 240),
    ("stream_triad", {"n": 10}, "float64", 20, 240),
    ("stream_dot", {"n": 10}, "float64", 20, 160),
    ("stream_fill", {"n": 10}, "float64", 0, 80),  # write-only: one array written
    ("fma_intensity", {"n": 10, "k": 8}, "float32", 160, 80),
    ("fma_intensity", {"n": 10, "k": 1024}, "float16", 2 * 1024 * 10, 40),
    # elementary: k evaluations per element (erf's step adds one FLOP), one load and one store
    ("elementary", {"n": 10, "k": 8, "fn": "cos"}, "float32", 80, 80),
    ("elementary", {"n": 10, "k": 8, "fn": "erf"}, "bfloat16", 160, 40),
    # collectives, n = 1000 elements per rank on N ranks: bytes = nccl-tests' S x busbw factor, FLOPs the adds
    # all_reduce: S = 4000 (float32), factor 2(N-1)/N = 1, 1.5, 1.75; adds (N-1)·n
    ("all_reduce", {"n": 1000, "ranks": 2}, "float32", 1000, 4000),
    ("all_reduce", {"n": 1000, "ranks": 4}, "float32", 3000, 6000),
    ("all_reduce", {"n": 1000, "ranks": 8}, "float32", 7000, 7000),
    ("all_reduce", {"n": 1000, "ranks": 3}, "float32", 2000, 5333),  # 4000 · 4/3, to the nearest byte
    # all_gather: S = n·s·N = 4000, 8000, 16000 (bfloat16), factor (N-1)/N = 1/2, 3/4, 7/8
    ("all_gather", {"n": 1000, "ranks": 2}, "bfloat16", 0, 2000),
    ("all_gather", {"n": 1000, "ranks": 4}, "bfloat16", 0, 6000),
    ("all_gather", {"n": 1000, "ranks": 8}, "bfloat16", 0, 14000),
    # reduce_scatter: S = n·s·N = 8000, 16000, 32000 (float32), factor (N-1)/N; adds (N-1)·n·N
    ("reduce_scatter", {"n": 1000, "ranks": 2}, "float32", 2000, 4000),
    ("reduce_scatter", {"n": 1000, "ranks": 4}, "float32", 12000, 12000),
    ("reduce_scatter", {"n": 1000, "ranks": 8}, "float32", 56000, 28000),
    # all_to_all: S = n·s·N = 4000, 8000, 16000 (float16), factor (N-1)/N
    ("all_to_all", {"n": 1000, "ranks": 2}, "float16", 0, 2000),
    ("all_to_all", {"n": 1000, "ranks": 4}, "float16", 0, 6000),
    ("all_to_all", {"n": 1000, "ranks": 8}, "float16", 0, 14000),
    # broadcast and send_recv: S = n·s, factor 1 whatever N
    ("broadcast", {"n": 1000, "ranks": 2}, "float32", 0, 4000),
    ("broadcast", {"n": 1000, "ranks": 8}, "float32", 0, 4000),
    ("send_recv", {"n": 1000, "ranks": 2}, "float32", 0, 4000),
    ("send_recv", {"n": 1000, "ranks": 4}, "bfloat16", 0, 2000),
    # the link matrix: each pair's result is S = n·s, what one end sends, factor 1, in every direction
    ("sendrecv_pairs", {"n": 1000, "ranks": 4, "direction": "both"}, "float32", 0, 4000),
    ("sendrecv_pairs", {"n": 1000, "ranks": 8, "direction": "a_to_b"}, "bfloat16", 0, 2000),
]


@pytest.mark.parametrize("op_name, params, dtype, flops, nbytes", CASES)
def test_flops_and_bytes_match_hand_computed_values(op_name, params, dtype, flops, nbytes):
    op = get_op(op_name)
    assert op.flops(params, dtype) == flops
    assert op.bytes(params, dtype) == nbytes


def test_every_op_has_a_hand_computed_case():
    # ops that plugins registered in this test process (other tests plant faulty ones) are not ours
    assert {name for name, *_ in CASES} == set(builtin_ops())


def test_a_collective_busbw_is_its_bytes_over_time_and_algbw_its_size_over_time():
    # nccl-tests: 8 ranks all_reduce 1 GiB (float32) in 5 ms: algbw = 1 GiB / 5 ms, busbw = algbw x 7/4
    op, params = get_op("all_reduce"), {"n": 1 << 28, "ranks": 8}
    assert isinstance(op, CollectiveOp)
    algbw = (1 << 30) / 5e-3 / 1e9
    assert op.size_bytes(params, "float32") == 1 << 30
    assert op.bytes(params, "float32") / 5e-3 / 1e9 == pytest.approx(algbw * 7 / 4, rel=1e-12)
    assert op.algbw_gbps(algbw * 7 / 4, 8) == pytest.approx(algbw, rel=1e-12)


def test_ranks_all_is_the_cpu_group_in_the_pure_models():
    from rooflab.suite.ops.collective import CPU_ALL_RANKS

    op = get_op("all_gather")
    assert op.bytes({"n": 1000, "ranks": "all"}, "float32") == op.bytes({"n": 1000, "ranks": CPU_ALL_RANKS}, "float32")


def test_defaults_fill_missing_params():
    # matmul defaults m = n = k = 512, batch 1
    assert get_op("matmul").flops({}, "float32") == 2 * 512**3
    assert get_op("matmul").flops({"batch": 1}, "float32") == get_op("matmul").flops({}, "float32")
    # attention causal default False: full count
    params = {"batch": 1, "heads": 1, "seq_q": 4, "seq_k": 4, "head_dim": 2}
    assert get_op("attention").flops(params, "float16") == 4 * 16 * 2


def test_models_are_pure_and_scale_linearly():
    op = get_op("triad")
    assert op.bytes({"n": 1000}, "float32") == 1000 * op.bytes({"n": 1}, "float32")
    assert op.bytes({"n": 7}, "float32") == op.bytes({"n": 7}, "float32")
    gemm = get_op("matmul")
    assert (gemm.flops({"m": 2, "n": 3, "k": 4, "batch": 3}, "float32")
            == 3 * gemm.flops({"m": 2, "n": 3, "k": 4}, "float32"))


def test_fma_intensity_is_k_over_element_size():
    op = get_op("fma_intensity")
    for dtype, size in (("float64", 8), ("float32", 4), ("float16", 2)):
        for k in (1, 64, 1024):
            params = {"n": 1 << 20, "k": k}
            assert op.flops(params, dtype) / op.bytes(params, dtype) == pytest.approx(k / size)


def test_naive_attention_memory_counts_the_score_matrix_but_bytes_do_not():
    op = get_op("attention")
    base: dict[str, ParamValue] = {"batch": 2, "heads": 4, "seq_q": 1024, "seq_k": 1024, "head_dim": 64,
                                   "causal": False}
    naive = dict(base, kernel="naive")
    flash = dict(base, kernel="sdpa_flash")
    assert op.bytes(naive, "float16") == op.bytes(flash, "float16")
    scores = 2 * 4 * 1024 * 1024 * 2
    assert op.memory_bytes(naive, "float16") >= op.bytes(naive, "float16") + scores
    assert op.memory_bytes(flash, "float16") < op.bytes(flash, "float16") + scores


def test_memory_estimates_cover_inputs_and_outputs():
    for name, params, dtype, _, nbytes in CASES:
        assert get_op(name).memory_bytes(params, dtype) >= nbytes, name
