"""The compiled backend on the CPU for a few representative ops (each compile costs seconds)."""
from __future__ import annotations

import pytest
import torch

from rooflab.suite.ops.common import compiled_skip_reason, fresh_compile
from rooflab.suite.ops.registry import get_op
from tests.suite.test_ops import CPU, make_case, planted_outputs

pytestmark = pytest.mark.skipif(compiled_skip_reason("cpu") is not None, reason=str(compiled_skip_reason("cpu")))


@pytest.mark.parametrize("name", ["cos_cos", "bias_gelu_dropout_residual"])
def test_compiled_op_matches_its_reference(name):
    op = get_op(name)
    case = make_case(op, "float32", "compiled")
    assert op.skip_reason(case, CPU) is None
    prepared = op.prepare(case, CPU, seed=2)
    output = prepared.fn()
    assert prepared.check(output) is None
    assert prepared.check(prepared.fn()) is None
    if name != "bias_gelu_dropout_residual":  # its planted faults are tested on the eager form
        for label, wrong in planted_outputs(output, "float32").items():
            assert prepared.check(wrong), label


def test_fresh_compile_gives_each_prepare_its_own_code_object():
    def square(x):
        return x * x

    first, second = fresh_compile(square), fresh_compile(square)
    assert first is not second
    # dynamo keys its cache on the code object: each copy must have its own
    assert hasattr(first, "_torchdynamo_orig_callable") and hasattr(second, "_torchdynamo_orig_callable")
    assert first._torchdynamo_orig_callable.__code__ is not second._torchdynamo_orig_callable.__code__
    assert first._torchdynamo_orig_callable.__code__ is not square.__code__


def test_compiled_and_eager_agree_on_the_same_inputs():
    op = get_op("cos_cos")
    eager = op.prepare(make_case(op, "float32", "eager"), CPU, seed=9).fn().clone()
    compiled = op.prepare(make_case(op, "float32", "compiled"), CPU, seed=9).fn()
    assert torch.allclose(eager, compiled, rtol=1e-5, atol=1e-6)
