"""Options added to ops without changing existing case keys (fast_accum, compile_mode), and memory
estimates that count what the op and its check really allocate."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rooflab.suite.case import Case, ParamValue
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops import common
from rooflab.suite.ops.registry import get_op

CPU = DeviceInfo(kind="cpu", name="cpu", torch_device="cpu", memory_bytes=1 << 36, l2_bytes=32 << 20)
GPU = DeviceInfo(kind="cuda", name="H100", torch_device="cuda:0", memory_bytes=80 << 30, l2_bytes=50 << 20,
                 compute_capability=(9, 0))
ROOT = Path(__file__).resolve().parents[2]


def case(op: str, backend: str = "eager", dtype: str = "float32", **params) -> Case:
    o = get_op(op)
    return Case(op=op, op_version=o.version, family=o.family, backend=backend, dtype=dtype, cache="hot",
                timing_mode="launch", params=o.resolved_params(params))


@pytest.mark.parametrize("op, params", [("matmul", {"m": 4096, "n": 4096, "k": 4096}), ("copy", {"n": 1 << 20}),
                                        ("softmax", {"rows": 64, "cols": 64}), ("attention", {"kernel": "naive"})])
def test_options_at_their_default_leave_case_keys_as_they_were(op: str, params: dict) -> None:
    o = get_op(op)
    plain = o.resolved_params(params)
    assert "compile_mode" not in plain and "fast_accum" not in plain
    assert o.resolved_params({**params, "compile_mode": "default"}) == plain  # spelled-out default: same key
    assert o.with_defaults(params)["compile_mode"] == "default"
    tuned = o.resolved_params({**params, "compile_mode": "max-autotune-no-cudagraphs"})
    assert tuned["compile_mode"] == "max-autotune-no-cudagraphs"


def test_fast_accum_is_a_float8_option() -> None:
    op = get_op("matmul")
    assert op.resolved_params({"fast_accum": True})["fast_accum"] is True
    reason = op.skip_reason(case("matmul", dtype="bfloat16", fast_accum=True), GPU)
    assert reason and "float8" in reason


def test_both_fast_accum_variants_run_scaled_mm_with_their_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool | None] = []  # the flag of each call (None: not passed)
    real = torch._scaled_mm

    def spy(*args, **kwargs):
        seen.append(kwargs.get("use_fast_accum"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    op = get_op("matmul")
    for fast in (False, True):
        c = case("matmul", dtype="float8_e4m3fn", m=64, n=48, k=512, fast_accum=fast)
        prepared = op.prepare(c, CPU, seed=5)  # torch._scaled_mm runs on the CPU too
        out = prepared.fn()
        assert prepared.check(out) is None
        assert prepared.check(out * 1.05) is not None  # a 5 % error is still caught with fast_accum
    assert seen[0] is False and seen[-1] is True


def test_compile_mode_other_than_default_needs_the_compiled_backend() -> None:
    reason = get_op("cos_cos").skip_reason(
        case("cos_cos", backend="eager", compile_mode="max-autotune-no-cudagraphs"), CPU)
    assert reason and "compiled backend only" in reason


def test_fresh_compile_passes_the_mode_to_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []

    def recording_compile(fn: Callable[..., Any], **kw: Any) -> Callable[..., Any]:
        calls.append(kw)
        return fn

    monkeypatch.setattr(common.torch, "compile", recording_compile)
    common.fresh_compile(lambda x: x + 1)
    common.fresh_compile(lambda x: x + 1, "max-autotune-no-cudagraphs")
    assert calls == [{"dynamic": False, "mode": None}, {"dynamic": False, "mode": "max-autotune-no-cudagraphs"}]
    with pytest.raises(ValueError, match="allowed: default, max-autotune-no-cudagraphs"):
        common.fresh_compile(lambda x: x, "reduce-overhead")


def test_compiled_case_prepares_with_its_compile_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    modes: list[str] = []
    from rooflab.suite.ops import gemm

    def fresh_compile(fn: Callable[..., Any], mode: str = "default") -> Callable[..., Any]:
        modes.append(mode)
        return fn

    monkeypatch.setattr(gemm, "fresh_compile", fresh_compile)
    c = case("matmul_bias_gelu", backend="compiled", m=32, n=32, k=32, compile_mode="max-autotune-no-cudagraphs")
    prepared = get_op("matmul_bias_gelu").prepare(c, CPU, seed=1)
    assert modes == ["max-autotune-no-cudagraphs"] and prepared.check(prepared.fn()) is None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_sdpa_math_estimate_counts_float32_scores(dtype: str) -> None:
    b, h, s, d = 2, 16, 8192, 64
    params: dict[str, ParamValue] = {"batch": b, "heads": h, "seq_q": s, "seq_k": s, "head_dim": d,
                                     "kernel": "sdpa_math"}
    need = get_op("attention").memory_bytes(get_op("attention").resolved_params(params), dtype)
    assert need >= 3 * b * h * s * s * 4  # scores and probabilities in float32 whatever the input dtype


def test_dropout_check_memory_is_bounded_and_in_the_estimate(tmp_path: Path) -> None:
    """Peak resident memory of the check, measured in a fresh process, stays within the estimate's
    check share (the whole-array float64 check of before needed several times more)."""
    script = textwrap.dedent("""
        import json, resource, sys
        import torch
        from rooflab.suite.case import Case
        from rooflab.suite.device import DeviceInfo
        from rooflab.suite.ops import pointwise
        from rooflab.suite.ops.registry import get_op
        pointwise.CHECK_CHUNK_ELEMENTS = 1 << 20
        cpu = DeviceInfo(kind="cpu", name="cpu", torch_device="cpu", memory_bytes=1 << 36, l2_bytes=32 << 20)
        op = get_op("bias_gelu_dropout_residual")
        n, hidden = 1 << 23, 1024
        c = Case(op=op.name, op_version=op.version, family=op.family, backend="eager", dtype="float32", cache="hot",
                 timing_mode="launch", params=op.resolved_params({"n": n, "hidden": hidden}))
        prepared = op.prepare(c, cpu, 3)
        out = prepared.fn()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        verdict = prepared.check(out)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        bad = out.clone()
        bad[-1, :7] += 3.0  # a planted error in the last chunk
        caught = prepared.check(bad)
        print(json.dumps({"verdict": verdict, "growth": peak - before, "check_bytes": op.check_bytes(n, hidden),
                          "caught": caught}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert res["verdict"] is None
    assert res["caught"] and "rows 7168..8191" in res["caught"]
    assert res["growth"] <= res["check_bytes"], res
