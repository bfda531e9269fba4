"""Reports ask the op (suite.ops.base.Op) whether it is read-only, a fusion chain, and what its
unfused form moves; they keep no op-name lists or byte formulas of their own, and size no unknown dtype."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from rooflab.reports.data.op_facts import reads_only, unfused_bytes
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.walls.diagnosis import diagnose, fusion_gains
from rooflab.suite.ops.pointwise import CosCos
from rooflab.suite.ops.registry import _ops, register
from tests.reports.synth import H100, device_rows, frame, row


class PlantedChain(CosCos):
    """A user's op: a fusion chain that only reads (a made-up op, to see that reports ask the op)."""

    name = "planted_chain_ro"
    reads_only = True

    def unfused_bytes(self, params, dtype):
        return 7 * int(self.p(params)["n"]) * 2  # a figure no report formula could know


@pytest.fixture
def planted() -> Iterator[None]:
    register(PlantedChain)
    try:
        yield
    finally:
        _ops.pop(PlantedChain.name, None)


def test_unknown_dtype_is_not_sized() -> None:
    assert unfused_bytes("cos_cos", {"n": 10}, "float8_e4m3fn") == 4 * 10 * 1
    assert unfused_bytes("cos_cos", {"n": 10}, "float4_e2m1") is None  # not 4 bytes per element
    assert unfused_bytes("no_such_op", {"n": 10}, "float32") is None
    assert unfused_bytes("copy", {"n": 10}, "float32") is None  # one kernel: no unfused form


def test_defaults_come_from_the_op() -> None:
    # hidden left out of the stored params: the op's default (1024) applies, not 0
    n = 4096
    assert unfused_bytes("bias_gelu_dropout_residual", {"n": n}, "float16") == (9 * n + 1024) * 2 + n


def test_reports_ask_a_registered_op(planted: None) -> None:
    n = 1 << 26  # 256 MiB of float32: far beyond the L2, so the HBM roofs apply
    assert reads_only(PlantedChain.name) and not reads_only("cos_cos") and reads_only("stream_dot")
    eager = row(op=PlantedChain.name, family="pointwise", params={"n": n}, flops=2 * n, nbytes=2 * 4 * n, median_ms=0.2)
    compiled = row(op=PlantedChain.name, family="pointwise", params={"n": n}, flops=2 * n, nbytes=2 * 4 * n,
                   median_ms=0.1, backend="compiled")
    gains = fusion_gains(frame([eager, compiled]))
    assert list(gains["op"]) == [PlantedChain.name]
    assert gains.iloc[0]["unfused_bytes"] == 7 * n * 2

    # held against the read-only HBM roof because the op says it only reads
    df = frame(device_rows(hbm_gbps=3000.0) + [eager])  # read-only roof 3150 GB/s, read-write 3000
    diag = diagnose(df, compute_ceilings(df, H100)).set_index("case_key")
    assert diag.loc[eager["case_key"]]["bandwidth_roof_gbps"] == pytest.approx(3000.0 * 1.05)


@pytest.mark.parametrize("name, value", [("m", -3), ("m", 2.5), ("k", True)])
def test_a_bad_op_parameter_gets_one_message_from_a_spec_and_from_predict(name: str, value: object) -> None:
    from rooflab.reports.errors import ReportInputError
    from rooflab.reports.walls.predict import predict
    from rooflab.suite.errors import SpecError
    from rooflab.suite.spec import expand, parse_spec

    given = {"m": 64, "n": 64, "k": 64, name: value}
    shown = ", ".join(f"{k}: {str(v).lower()}" for k, v in given.items())
    spec = f"name: t\nbenchmarks:\n  - name: a\n    op: matmul\n    params: {{{shown}}}\n"
    with pytest.raises(SpecError) as from_spec:
        expand(parse_spec(spec, "t.yaml"))
    with pytest.raises(ReportInputError) as from_predict:
        predict("matmul", given, "float32", "H100 SXM")
    reason = str(from_predict.value).removeprefix("--shape: ")
    assert str(from_spec.value).endswith(f": {reason}"), (str(from_spec.value), reason)
    assert "allowed: integers > 0" in reason
