"""KEY=VALUE filters over expanded cases (suite.spec.apply_filters)."""
from __future__ import annotations

import pytest

from rooflab.suite.errors import SpecError
from rooflab.suite.spec import apply_filters, expand, parse_spec
from tests.suite.spec_fakes import FAKE_OPS

SPEC = """
name: filters
benchmarks:
  - name: mm
    op: matmul
    dtypes: [float32, float16, bfloat16]
    backends: [eager, compiled]
    cache: [cold, hot]
    tags: [gemm, peak]
    params: {m=n=k: [256, 512]}
  - name: attn
    op: attention
    dtypes: [float16]
    tags: [attention]
    params: {seq_q=seq_k: [128, 256], causal: [true, false], dropout: [0, 0.25]}
  - name: stream
    op: copy
    dtypes: [float32]
    params: {n: 1024}
"""


@pytest.fixture(scope="module")
def cases():
    return expand(parse_spec(SPEC, "filters.yaml", ops=FAKE_OPS), ops=FAKE_OPS)


def test_no_filter_keeps_all(cases) -> None:
    assert apply_filters(cases, [], ops=FAKE_OPS) == cases


def test_same_key_is_or_and_different_keys_are_and(cases) -> None:
    both = apply_filters(cases, ["dtype=float16", "dtype=bfloat16", "op=matmul"], ops=FAKE_OPS)
    assert len(both) == 2 * 2 * 2 * 2
    assert {c.dtype for c in both} == {"float16", "bfloat16"} and {c.op for c in both} == {"matmul"}
    # comma-separated values are the same as repeating the key
    assert apply_filters(cases, ["dtype=float16,bfloat16", "op=matmul"], ops=FAKE_OPS) == both


def test_each_case_key(cases) -> None:
    assert {c.family for c in apply_filters(cases, ["family=gemm"], ops=FAKE_OPS)} == {"gemm"}
    assert {c.backend for c in apply_filters(cases, ["backend=compiled"], ops=FAKE_OPS)} == {"compiled"}
    assert {c.cache for c in apply_filters(cases, ["cache=hot"], ops=FAKE_OPS)} == {"hot"}
    assert len(apply_filters(cases, ["timing_mode=launch"], ops=FAKE_OPS)) == len(cases)
    assert {c.benchmark for c in apply_filters(cases, ["benchmark=attn"], ops=FAKE_OPS)} == {"attn"}
    assert {c.benchmark for c in apply_filters(cases, ["tag=peak"], ops=FAKE_OPS)} == {"mm"}


def test_param_filters_compare_values_not_text(cases) -> None:
    big = apply_filters(cases, ["m=512"], ops=FAKE_OPS)
    assert big and all(c.params["m"] == 512 for c in big)
    assert apply_filters(cases, ["m=512.0"], ops=FAKE_OPS) == big
    causal = apply_filters(cases, ["causal=true"], ops=FAKE_OPS)
    assert len(causal) == 4 and all(c.params["causal"] is True for c in causal)
    assert apply_filters(cases, ["dropout=0.25"], ops=FAKE_OPS) == [c for c in cases if c.params.get("dropout") == 0.25]
    assert apply_filters(cases, ["dropout=0"], ops=FAKE_OPS) == [c for c in cases if c.params.get("dropout") == 0.0]


def test_filter_matching_nothing_is_empty(cases) -> None:
    assert apply_filters(cases, ["op=matmul", "benchmark=attn"], ops=FAKE_OPS) == []
    assert apply_filters(cases, ["dtype=float64"], ops=FAKE_OPS) == []  # a known dtype none of these cases has


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("op", "is not KEY=VALUE"),
        ("=matmul", "is not KEY=VALUE"),
        ("op=", "is not KEY=VALUE"),
        ("colour=red", "unknown key 'colour'; allowed: op, family, backend, dtype, cache, timing_mode, benchmark, tag"),
        ("dtype=bfloat61", "no case can have dtype 'bfloat61' (an unknown dtype); allowed: float64, float32, tf32"),
        ("dtype=float16,bf16", "dtype 'bf16' (an unknown dtype)"),
        ("op=matmull", "op 'matmull' (an unknown op); allowed: attention, copy, matmul"),
        ("cache=warm", "cache 'warm' (an unknown cache); allowed: cold, hot"),
        ("timing_mode=replay", "allowed: launch, graph"),
        ("backend=triton", "allowed: eager, compiled, cupy"),
        ("family=gemms", "allowed: pointwise, reduction, gemm, attention, layer, overhead, probe"),
    ],
)
def test_bad_filters(cases, text: str, fragment: str) -> None:
    with pytest.raises(SpecError, match="filter") as info:
        apply_filters(cases, [text], ops=FAKE_OPS)
    assert fragment in str(info.value)


def test_unknown_key_lists_param_names(cases) -> None:
    with pytest.raises(SpecError) as info:
        apply_filters(cases[:1], ["size=4"], ops={})
    assert "or an op parameter (batch, k, m, n)" in str(info.value)
    # a parameter of another op is a known key: it just matches nothing here
    assert apply_filters(cases[:1], ["seq_q=128"], ops=FAKE_OPS) == []
