"""The elementary-function probe (suite/ops/elementary.py) and the elementary-function counts the ops
declare (Op.elementary): known answers, the chains on the CPU. The probe's compiled runs and its check
against planted faults are in tests/suite/test_ops_compiled.py, with the other compiled runs."""
from __future__ import annotations

import pytest
import torch

from rooflab.suite.case import Case
from rooflab.suite.ops.base import case_skip_reason
from rooflab.suite.ops.elementary import elementary_chain
from rooflab.suite.ops.registry import all_ops, get_op
from rooflab.vocab import ElementaryFunction
from tests.present import present
from tests.suite.devices import CPU


def probe_case(fn: str, dtype: str = "float32", n: int = 4099, k: int = 8) -> Case:
    return Case("elementary", 1, "probe", "compiled", dtype, "cold", "launch", {"n": n, "k": k, "fn": fn})


@pytest.mark.parametrize("fn, flops_per_step", [("cos", 1), ("exp", 1), ("erf", 2)])
def test_probe_models_are_known_answers(fn, flops_per_step):
    op = get_op("elementary")
    params = {"n": 1000, "k": 37, "fn": fn}
    assert op.flops(params, "float32") == flops_per_step * 37 * 1000
    assert op.bytes(params, "bfloat16") == 2 * 1000 * 2
    assert op.elementary(params, "float32") == {ElementaryFunction(fn): 37 * 1000}


@pytest.mark.parametrize("name, params, expected", [
    ("gelu", {"n": 1000}, {"erf": 1000}),
    ("cos_cos", {"n": 1000}, {"cos": 2000}),
    ("bias_gelu_dropout_residual", {"n": 4096, "hidden": 64}, {"erf": 4096}),
    ("softmax", {"rows": 12, "cols": 257}, {"exp": 12 * 257}),
    ("matmul_bias_gelu", {"m": 40, "n": 24, "k": 72}, {"erf": 40 * 24}),
    ("attention", {"batch": 2, "heads": 3, "seq_q": 64, "seq_k": 48, "causal": False}, {"exp": 2 * 3 * 64 * 48}),
    ("attention", {"batch": 2, "heads": 3, "seq_q": 64, "seq_k": 64, "causal": True}, {"exp": 2 * 3 * 64 * 64 // 2}),
    ("copy", {"n": 1000}, {}),
    ("layernorm", {"rows": 12, "cols": 257}, {}),
    ("matmul", {"m": 40, "n": 24, "k": 72}, {}),
])
def test_ops_declare_their_elementary_functions(name, params, expected):
    op = get_op(name)
    got = op.elementary(op.with_defaults(params), "float32")
    assert {str(f): n for f, n in got.items()} == expected
    # an elementary function is one FLOP of the op's model: never more of them than FLOPs
    assert sum(got.values()) <= op.flops(op.with_defaults(params), "float32")


def test_every_declared_function_is_one_the_probe_measures():
    probed = set(get_op("elementary").params["fn"].choices or ())
    for op in all_ops().values():
        if op.family == "layer":  # built from parts, declared on none (docs/counters.md)
            continue
        declared = op.elementary(op.with_defaults({}), op.dtypes[0])
        assert {str(f) for f in declared} <= probed, op.name


@pytest.mark.parametrize("fn", ["cos", "exp", "erf"])
def test_chains_stay_bounded_and_agree_with_float64_over_long_k(fn):
    x = torch.randn(4096, generator=torch.Generator().manual_seed(2)) * 3  # under the intra-op grain: one thread
    got = elementary_chain(x, 512, fn)
    ref = elementary_chain(x.double(), 512, fn)
    assert bool(torch.isfinite(got).all()) and float(got.abs().max()) < 10
    assert float((got.double() - ref).abs().max()) < 1e-5  # contractive: errors do not grow with k


def test_k_out_of_range_is_skipped_with_a_reason():
    op = get_op("elementary")
    assert "k must be between 1 and 4096" in present(case_skip_reason(op, probe_case("cos", k=5000), CPU))
    assert "backend eager is not supported" in present(case_skip_reason(
        op, Case("elementary", 1, "probe", "eager", "float32", "cold", "launch", {"n": 8, "k": 1, "fn": "cos"}), CPU))
