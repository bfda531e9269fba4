"""The compiled backend on the CPU (each compile costs seconds): a few representative ops and the
elementary-function probe, whose only backend it is. One module, so that one worker compiles."""
from __future__ import annotations

import pytest
import torch

from rooflab.suite.ops.base import case_skip_reason
from rooflab.suite.ops.common import compiled_skip_reason, fresh_compile
from rooflab.suite.ops.elementary import elementary_chain
from rooflab.suite.ops.registry import get_op
from tests.suite.devices import CPU
from tests.suite.test_elementary import probe_case
from tests.suite.test_layer import layer_case
from tests.suite.test_ops import (
    COMPILED_RUNS,
    assert_runs_and_catches_planted_faults,
    make_case,
    planted_outputs,
    run_ids,
)


@pytest.fixture(scope="module", autouse=True)
def _compiler() -> None:
    """Skip the module where torch.compile cannot run. Asked when the module's first test runs, not
    at collection (the question imports torch._dynamo), and once per module, so that one worker runs
    all of it (tests/scheduling.py): only that worker imports Inductor's compiler and compiles."""
    reason = compiled_skip_reason("cpu")
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("run", COMPILED_RUNS, ids=run_ids)
def test_compiled_op_runs_on_the_cpu_and_its_check_catches_planted_faults(run):
    assert_runs_and_catches_planted_faults(run)


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


@pytest.mark.parametrize("fn", ["cos", "exp", "erf"])
def test_the_elementary_probe_runs_on_the_cpu_and_its_check_catches_planted_faults(fn):
    op = get_op("elementary")
    case = probe_case(fn)
    assert case_skip_reason(op, case, CPU) is None
    prepared = op.prepare(case, CPU, seed=5)
    out = prepared.fn()
    assert prepared.check(out) is None
    assert prepared.check(out * 1.01), "a scaled output passed"
    one = out.clone()
    one[len(one) // 2] += 0.5
    assert prepared.check(one), "one wrong element passed"
    other = "exp" if fn != "exp" else "cos"  # the chain of another function is caught
    x = torch.randn(4099, generator=torch.Generator().manual_seed(5))
    assert prepared.check(elementary_chain(x, 8, other)) is not None


def test_the_compiled_layer_is_prepared_without_a_profiled_call():
    # compiled lazily at its first call, so no part of it is timed on its own
    op = get_op("transformer_block")
    assert op.prepare(layer_case(backend="compiled"), CPU, seed=1).profiled is None
