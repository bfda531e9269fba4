"""Every op's bytes read and written, held against what its reference implementation touches.

The count (tests/suite/byte_count.py) watches the aten ops of one call of the op's eager callable
(the one `prepare` returns; for the two probes without an eager backend, the chain function their
compiled backend compiles) on small random CPU inputs, and adds up the inputs read and the outputs
written; an op whose declared split disagrees fails, and so does a planted one that is right in
total and wrong on each side. The transformer block's split is the sum of its parts' op models:
each part's ops are counted at the part's shape.
"""
from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch

from rooflab.suite.case import Case, ParamValue
from rooflab.suite.ops import elementary, probes
from rooflab.suite.ops.base import Op, Params, byte_split
from rooflab.suite.ops.collective import CollectiveOp
from rooflab.suite.ops.layer_model import PartKind, block_parts, forward_parts, part_ops
from rooflab.suite.ops.pointwise import Triad
from rooflab.suite.ops.registry import builtin_ops, get_op, register
from tests.suite.byte_count import Counted, count_bytes
from tests.suite.devices import CPU

# per op, the small cases counted (sizes chosen apart, so that a count swapping two of them differs)
CASES: dict[str, list[tuple[dict[str, ParamValue], str]]] = {
    "copy": [({"n": 1000}, "float32"), ({"n": 777}, "bfloat16")],
    "scale": [({"n": 1000}, "float32")],
    "add": [({"n": 1000}, "float64")],
    "triad": [({"n": 1000}, "float32")],
    "gelu": [({"n": 1000}, "float32")],
    "cos_cos": [({"n": 1000}, "float32")],
    "bias_gelu_dropout_residual": [({"n": 96 * 40, "hidden": 96, "p": 0.25}, "float32")],
    "sum": [({"rows": 24, "cols": 40}, "float32")],
    "amax": [({"rows": 24, "cols": 40}, "bfloat16")],
    "softmax": [({"rows": 24, "cols": 40}, "float32")],
    "layernorm": [({"rows": 24, "cols": 40}, "float32")],
    "rmsnorm": [({"rows": 24, "cols": 40}, "float32")],
    "matmul": [({"m": 24, "n": 40, "k": 56}, "float32"), ({"m": 24, "n": 40, "k": 56, "batch": 3}, "bfloat16")],
    "matmul_bias_gelu": [({"m": 24, "n": 40, "k": 56}, "float32")],
    "attention": [
        ({"batch": 2, "heads": 3, "seq_q": 20, "seq_k": 28, "head_dim": 16}, "float32"),
        ({"batch": 2, "heads": 3, "seq_q": 20, "seq_k": 20, "head_dim": 16, "causal": True, "kernel": "naive"},
         "float32"),
    ],
    "launch": [({"n": 300}, "float32")],
    "stream_copy": [({"n": 1000}, "float32")],
    "stream_scale": [({"n": 1000}, "float32")],
    "stream_add": [({"n": 1000}, "float32")],
    "stream_triad": [({"n": 1000}, "float64")],
    "stream_dot": [({"n": 1000}, "float32")],
    "stream_fill": [({"n": 1000}, "bfloat16")],
    "fma_intensity": [({"n": 1000, "k": 5}, "float32")],
    "elementary": [({"n": 1000, "k": 3, "fn": "erf"}, "float32")],
}
# the probes without an eager backend: the function their compiled backend compiles, on one input x
CHAINS = {
    "fma_intensity": lambda x, p: probes._fma_chain(x, int(p["k"]), probes.ALPHA),
    "elementary": lambda x, p: elementary.elementary_chain(x, int(p["k"]), str(p["fn"])),
}
# the block, counted part by part
BLOCK = {"batch": 2, "seq": 12, "hidden": 48, "heads": 3, "mlp_ratio": 2.5}


def counted_split(op: Op, params: Params, dtype: str) -> Counted:
    """What one call of the op's reference implementation reads and writes (module docstring)."""
    resolved = op.resolved_params(params)
    if op.name in CHAINS:
        x = torch.randn(int(resolved["n"]), dtype=getattr(torch, dtype), generator=torch.Generator().manual_seed(3))
        return count_bytes(lambda: CHAINS[op.name](x, resolved))
    case = Case(op.name, op.version, op.family, "eager", dtype, "cold", "launch", resolved)
    prepared = op.prepare(case, CPU, 11)
    prepared.fn()  # the first call, with whatever it initialises, outside the count
    return count_bytes(prepared.fn)


def disagreement(op: Op, params: Params, dtype: str) -> str | None:
    """None when the op's declared split is what its reference implementation touches, else what differs."""
    resolved = op.resolved_params(params)
    split = byte_split(op, resolved, dtype)
    counted = counted_split(op, resolved, dtype)
    if split is None:
        return f"{op.name} declares no bytes read and written apart"
    problems = [f"{side}: declared {declared}, counted {seen}"
                for side, declared, seen in (("read", split[0], counted.read), ("written", split[1], counted.written))
                if declared != seen]
    if op.bytes(resolved, dtype) != sum(split):
        problems.append(f"bytes {op.bytes(resolved, dtype)} is not read + written ({sum(split)})")
    return f"{op.name} {dict(resolved)} {dtype}: " + "; ".join(problems) if problems else None


def test_every_builtin_op_is_counted_here_or_is_a_collective_or_the_block() -> None:
    ops = builtin_ops()
    collectives = {name for name, op in ops.items() if isinstance(op, CollectiveOp)}
    assert set(CASES) == set(ops) - collectives - {"transformer_block"}
    for name in collectives:  # their bytes are link bytes (nccl-tests' bus bytes), not memory read or written
        assert byte_split(ops[name], ops[name].resolved_params({"ranks": 2}), "float32") is None


@pytest.mark.parametrize(("name", "params", "dtype"),
                         [(name, params, dtype) for name, cases in CASES.items() for params, dtype in cases])
def test_the_declared_split_is_what_the_reference_implementation_touches(name: str, params: dict[str, ParamValue],
                                                                          dtype: str) -> None:
    assert disagreement(get_op(name), params, dtype) is None


class PlantedTriad(Triad):
    """triad with its total right (3·n·s) and each side wrong: one array read, two written."""

    name = "planted_triad_split"

    def bytes_read(self, params: Params, dtype: str) -> int:
        return super().bytes_read(params, dtype) // 2

    def bytes_written(self, params: Params, dtype: str) -> int:
        return super().bytes_written(params, dtype) * 2


def test_a_split_right_in_total_and_wrong_on_each_side_fails() -> None:
    planted, params = PlantedTriad(), {"n": 1000}
    assert planted.bytes(params, "float32") == get_op("triad").bytes(params, "float32")
    found = disagreement(planted, params, "float32")
    assert found is not None
    assert "read: declared 4000, counted 8000" in found and "written: declared 8000, counted 4000" in found


def test_the_count_sees_a_read_modify_write_on_both_sides_and_skips_scratch_and_views() -> None:
    a, b = torch.randn(500), torch.randn(500)
    scratch = torch.empty(500)

    def nstream() -> torch.Tensor:  # a += b (BabelStream's nstream without its scalar term)
        return a.add_(b)

    def via_scratch() -> torch.Tensor:  # a scratch buffer written then read back: an intermediate
        torch.cos(a, out=scratch)
        return torch.cos(scratch.t().reshape(-1))

    assert (count_bytes(nstream).read, count_bytes(nstream).written) == (4000, 2000)
    assert (count_bytes(via_scratch).read, count_bytes(via_scratch).written) == (2000, 2000)


def _part_counted(ops: tuple[tuple[str, dict[str, Any]], ...], dtype: str, params: Params) -> Counted:
    if ops:
        counts = [counted_split(get_op(op), p, dtype) for op, p in ops]
        return Counted(sum(c.read for c in counts), sum(c.written for c in counts))
    # SwiGLU's activation: silu(gate)·up, gate and up side by side in u [tokens, 2F]
    resolved = get_op("transformer_block").resolved_params(params)
    tokens = int(resolved["batch"]) * int(resolved["seq"])
    ffn = round(int(resolved["hidden"]) * float(resolved["mlp_ratio"]))
    u = torch.randn(tokens, 2 * ffn, dtype=getattr(torch, dtype))

    def swiglu() -> torch.Tensor:
        gate, up = u.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

    return count_bytes(swiglu)


@pytest.mark.parametrize(("norm", "activation"), [("rmsnorm", "gelu"), ("layernorm", "swiglu")])
def test_the_block_split_is_its_parts_counted(norm: str, activation: str) -> None:
    op = get_op("transformer_block")
    params = op.resolved_params({**BLOCK, "norm": norm, "activation": activation})
    ops = part_ops(params)
    parts = forward_parts(params, "float32")
    for part in parts:
        counted = _part_counted(ops.get(part.name, ()), "float32", params)
        assert (part.bytes_read, part.bytes_written) == (counted.read, counted.written), part.name
    assert byte_split(op, params, "float32") == (sum(int(p.bytes_read or 0) for p in parts),
                                                 sum(int(p.bytes_written or 0) for p in parts))
    both = op.resolved_params({**params, "pass": "forward_backward"})
    (backward,) = [p for p in block_parts(both, "float32") if p.kind == PartKind.BACKWARD]
    # the backward's stated rule keeps its total (2x a matmul's or attention's bytes, a memory part's
    # bytes and one more output) and splits it: nothing is counted twice or lost
    assert backward.bytes == (backward.bytes_read or 0) + (backward.bytes_written or 0)


def test_an_op_without_a_byte_model_is_refused_and_half_a_split_is_an_error() -> None:
    class NoBytes(Triad):
        name = "planted_no_bytes"
        bytes_read = Op.bytes_read  # type: ignore[assignment]
        bytes_written = Op.bytes_written  # type: ignore[assignment]

    class HalfSplit(Triad):
        name = "planted_half_split"
        backends: ClassVar[tuple[str, ...]] = ("eager",)

        def bytes_written(self, params: Params, dtype: str) -> None:  # type: ignore[override]
            return None

    with pytest.raises(TypeError, match="declares no byte model"):
        register(NoBytes)
    with pytest.raises(TypeError, match="only one of bytes_read and bytes_written"):
        HalfSplit().bytes({"n": 10}, "float32")
