"""Every op and probe on the CPU at small sizes: interface, seeded inputs, reference checks
(passing on the real output, failing on planted wrong outputs), skip reasons, and the registry."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rooflab.suite.case import BACKENDS, DTYPES, FAMILIES, Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops import registry
from rooflab.suite.ops.base import Op, ParamSpec, Prepared, case_skip_reason
from rooflab.suite.ops.common import as_torch, cupy_module
from rooflab.suite.ops.pointwise import Copy
from rooflab.suite.ops.registry import all_ops, get_op, register
from rooflab.vocab import CACHE_MODES, TIMING_MODES
from tests.present import present
from tests.suite.devices import CPU

REPO = Path(__file__).resolve().parents[2]
FAKE_GPU = DeviceInfo(
    kind="cuda", name="fake GPU", torch_device="cuda:0", memory_bytes=80 << 30, l2_bytes=50 << 20,
    compute_capability=(8, 0), sm_count=108,
)

PLAN_OPS = {
    "pointwise": {"copy", "scale", "add", "triad", "gelu", "cos_cos", "bias_gelu_dropout_residual"},
    "reduction": {"sum", "amax", "softmax", "layernorm", "rmsnorm"},
    "gemm": {"matmul", "matmul_bias_gelu"},
    "attention": {"attention"},
    "overhead": {"launch"},
    "probe": {"stream_copy", "stream_scale", "stream_add", "stream_triad", "stream_dot", "stream_fill",
              "fma_intensity"},
}

SMALL = {
    "pointwise": {"n": 3000},
    "probe": {"n": 3001},
    "reduction": {"rows": 12, "cols": 257},
    "gemm": {"m": 40, "n": 24, "k": 72},
    "attention": {"batch": 2, "heads": 2, "seq_q": 24, "seq_k": 24, "head_dim": 16},
    "overhead": {"n": 5},
    "layer": {"batch": 2, "seq": 24, "hidden": 64, "heads": 4},
}


def small_params(op: Op, **extra) -> dict:
    params = dict(SMALL[op.family])
    if op.name == "bias_gelu_dropout_residual":
        params.update(n=4096, hidden=64)
    if op.name == "fma_intensity":
        params["k"] = 3
    if op.name == "matmul":
        params["batch"] = 1
    params.update(extra)
    return params


def make_case(op: Op, dtype: str, backend: str = "eager", timing_mode: str = "launch", **params) -> Case:
    return Case(op.name, op.version, op.family, backend, dtype, "cold", timing_mode, small_params(op, **params))


def cpu_runs() -> list[tuple[str, str, str, dict]]:
    """(op, backend, dtype, extra params) for every eager combination the CPU runs, plus the CPU
    path of fma_intensity (compiled) in float32 and the attention kernels that run on the CPU."""
    runs: list[tuple[str, str, str, dict]] = []
    for name, op in all_ops().items():
        if name not in set().union(*PLAN_OPS.values()):
            continue
        for dtype in op.dtypes:
            if name == "fma_intensity":
                if dtype == "float32":
                    runs.append((name, "compiled", dtype, {}))
                continue
            if name == "attention":
                for kernel in ("sdpa_math", "sdpa_flash", "naive"):
                    for causal in (False, True):
                        runs.append((name, "eager", dtype, {"kernel": kernel, "causal": causal}))
                continue
            runs.append((name, "eager", dtype, {}))
    return runs


# the eager runs here; the compiled ones in tests/suite/test_ops_compiled.py, whose skip reason imports
# torch._dynamo and whose first compile imports Inductor (seconds of CPU), in the one worker that runs them
RUNS = [r for r in cpu_runs()
        if r[1] != "compiled" and get_op(r[0]).skip_reason(make_case(get_op(r[0]), r[2], r[1], **r[3]), CPU) is None]
COMPILED_RUNS = [r for r in cpu_runs() if r[1] == "compiled"]


def run_ids(run):
    name, backend, dtype, extra = run
    tail = ",".join(f"{k}={v}" for k, v in extra.items())
    return f"{name}-{backend}-{dtype}" + (f"-{tail}" if tail else "")


def planted_outputs(output, dtype: str):
    """Wrong outputs a check must reject: scaled by a few ulps of tolerance, and one perturbed element."""
    out = as_torch(output)
    factor = 1.01 if dtype in ("float32", "float64") else 1.08
    if out.dim() == 0:  # a dot product: its tolerance follows the size of its terms
        factor = 1.25
    scaled = out * factor
    one = out.clone()
    flat = one.reshape(-1)
    idx = flat.numel() // 2
    flat[idx] = flat[idx] + 1.0 + 2.0 * flat.abs().max()
    return {"scaled": scaled, "one element": one}


# ---------------------------------------------------------------- registry and interface


def test_registry_holds_every_op_of_the_plan():
    ops = all_ops()
    for family, names in PLAN_OPS.items():
        for name in names:
            assert name in ops, name
            assert ops[name].family == family


def test_get_op_unknown_name_lists_known_names():
    with pytest.raises(KeyError) as info:
        get_op("no_such_op")
    message = str(info.value)
    assert "no_such_op" in message and "matmul" in message and "stream_triad" in message


@pytest.mark.parametrize("name", sorted(set().union(*PLAN_OPS.values())))
def test_op_declares_a_valid_interface(name):
    op = get_op(name)
    assert op.name == name and op.version == (2 if name == "launch" else 1)  # launch v2: host time per launch
    assert op.family in FAMILIES
    assert op.cache_modes and set(op.cache_modes) <= set(CACHE_MODES)
    assert op.backends and set(op.backends) <= set(BACKENDS)
    assert op.dtypes and set(op.dtypes) <= set(DTYPES)
    assert set(op.timing_modes) <= set(TIMING_MODES)
    for pname, spec in op.params.items():
        assert isinstance(spec, ParamSpec)
        assert spec.default is not None, f"{name}.{pname} has no default"
        assert isinstance(spec.default, spec.type)
        if spec.choices is not None:
            assert spec.default in spec.choices
    resolved = op.resolved_params({})
    assert op.flops(resolved, op.dtypes[0]) >= 0
    assert op.bytes(resolved, op.dtypes[0]) > 0


def test_register_refuses_a_taken_name_unless_replacing():
    assert type(get_op("copy")) is Copy

    class Other(Copy):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register(Other)
    original = get_op("copy")
    try:
        assert register(Other, replace=True) is get_op("copy")
    finally:
        register(original, replace=True)
    assert get_op("copy") is original


def test_register_rejects_non_ops() -> None:
    with pytest.raises(TypeError):
        register(object())  # type: ignore[arg-type]  # a wrong type on purpose: the call must refuse it


PLUGIN = textwrap.dedent(
    '''
    from rooflab.suite.ops.pointwise import Copy
    from rooflab.suite.ops.registry import register

    class PlantedWrongCopy(Copy):
        """Copies, then adds 1 to the first element: a wrong op the check must catch."""
        name = "planted_wrong_copy"

        def prepare(self, case, device, seed):
            prepared = super().prepare(case, device, seed)
            inner = prepared.fn

            def fn():
                out = inner()
                out[0] += 1.0
                return out

            prepared.fn = fn
            return prepared

    register(PlantedWrongCopy)
    '''
)


def test_plugins_named_in_the_environment_load_in_a_fresh_process(tmp_path):
    (tmp_path / "rooflab_test_plugin.py").write_text(PLUGIN)
    script = textwrap.dedent(
        """
        from rooflab.suite.case import Case
        from rooflab.suite.device import DeviceInfo
        from rooflab.suite.ops.registry import get_op, all_ops
        op = get_op("planted_wrong_copy")
        assert "copy" in all_ops()
        dev = DeviceInfo("cpu", "cpu", "cpu", 1 << 30, 1 << 20)
        case = Case(op.name, 1, op.family, "eager", "float32", "cold", "launch", {"n": 64})
        p = op.prepare(case, dev, 0)
        print("CHECK:", p.check(p.fn()))
        """
    )
    env = dict(os.environ, ROOFLAB_PLUGINS="rooflab_test_plugin", PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "CHECK: output: 1 of 64 elements outside tolerance" in done.stdout


def test_a_plugin_that_cannot_be_imported_is_named(monkeypatch):
    monkeypatch.setenv("ROOFLAB_PLUGINS", "no_such_rooflab_plugin")
    monkeypatch.setattr(registry, "_loaded", False)
    with pytest.raises(ImportError) as info:
        registry.get_op("copy")
    assert "ROOFLAB_PLUGINS" in str(info.value) and "no_such_rooflab_plugin" in str(info.value)
    monkeypatch.delenv("ROOFLAB_PLUGINS")
    assert registry.get_op("copy").name == "copy"  # loads again once the variable is fixed


# ---------------------------------------------------------------- running on the CPU


@pytest.mark.parametrize("run", RUNS, ids=run_ids)
def test_op_runs_on_the_cpu_and_its_check_catches_planted_faults(run):
    assert_runs_and_catches_planted_faults(run)


def assert_runs_and_catches_planted_faults(run) -> None:
    name, backend, dtype, extra = run
    op = get_op(name)
    case = make_case(op, dtype, backend, **extra)
    assert op.skip_reason(case, CPU) is None
    prepared = op.prepare(case, CPU, seed=1)
    assert isinstance(prepared, Prepared)
    output = prepared.fn()
    assert prepared.check(output) is None
    output = prepared.fn()  # repeated calls give a correct result too
    assert prepared.check(output) is None
    for label, wrong in planted_outputs(output, dtype).items():
        message = prepared.check(wrong)
        assert message, f"planted fault ({label}) was not caught"


@pytest.mark.parametrize(
    "name", ["copy", "triad", "gelu", "cos_cos", "sum", "softmax", "layernorm", "rmsnorm", "matmul",
             "matmul_bias_gelu", "attention", "launch", "stream_scale", "stream_dot"]
)
def test_inputs_are_seeded_random_and_not_zero(name):
    op = get_op(name)
    case = make_case(op, "float32")
    outs = [as_torch(op.prepare(case, CPU, seed=s).fn()).clone() for s in (3, 3, 4)]
    assert torch.equal(outs[0], outs[1]), "same seed, different inputs"
    assert not torch.equal(outs[0], outs[2]), "different seeds, same inputs"
    assert bool((outs[0] != 0).any())
    if outs[0].numel() > 100:
        assert float((outs[0] != 0).double().mean()) > 0.5  # gelu rounds large negatives to -0


def test_dropout_op_differs_across_seeds_and_keeps_residual_where_dropped():
    op = get_op("bias_gelu_dropout_residual")
    case = make_case(op, "float32")
    a = op.prepare(case, CPU, seed=5)
    b = op.prepare(case, CPU, seed=6)
    out_a, out_b = a.fn(), b.fn()
    assert not torch.equal(out_a, out_b)
    assert a.check(out_a) is None
    # rebuild the inputs (same seed, same draw order) to plant a "dropout" that drops nothing
    from rooflab.suite.ops.common import generator, randn

    gen = generator(CPU, 5)
    x = randn((4096 // 64, 64), "float32", CPU, gen)
    bias = randn(64, "float32", CPU, gen)
    residual = randn((4096 // 64, 64), "float32", CPU, gen)
    kept_all = residual + torch.nn.functional.gelu(x + bias) / 0.9
    message = a.check(kept_all)
    assert message and "dropped fraction" in message
    dropped_all = residual.clone()
    assert "dropped fraction" in present(a.check(dropped_all))


def test_dropout_check_allows_the_rounding_of_terms_that_nearly_cancel():
    """bfloat16, as the op computes it (x + bias, gelu, / (1 - p), + residual, each rounded), with
    residuals that nearly cancel the kept term: the rounding of each term is large against their sum
    (a GPU run had 2-4 of 4.2M elements off by 0.024 at 0.055). That is no error; a value off by
    more than the terms' rounding still is."""
    from rooflab.suite.ops.pointwise import _check_dropout_chunk

    seed = int(torch.randint(0, 2**31, ()))
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(256, 64, generator=gen) * 3 + 1.0).to(torch.bfloat16)  # x + bias in about [0, 5.5]
    bias = (torch.randn(64, generator=gen) * 0.5).to(torch.bfloat16)
    keep = torch.rand(256, 64, generator=gen) > 0.1
    kept_term = torch.nn.functional.gelu(x + bias) / 0.9
    residual = (-kept_term.float() + 0.05 * torch.randn(256, 64, generator=gen)).to(torch.bfloat16)
    out = residual + torch.where(keep, kept_term, torch.zeros_like(kept_term))
    message, clear, dropped = _check_dropout_chunk(out, x, bias, residual, 0.1, "bfloat16")
    assert message is None and clear > 0.9 * out.numel() and 0.05 < dropped / clear < 0.15, (seed, message)
    wrong = out.clone()
    row, col = (int(i) for i in torch.nonzero(keep)[0])
    wrong[row, col] += 0.5  # about 30 bfloat16 steps of the terms' size (|terms| < 12)
    found = _check_dropout_chunk(wrong, x, bias, residual, 0.1, "bfloat16")[0] or ""
    assert "1 of 16384 elements outside tolerance" in found, (seed, found)


def test_fma_probe_reference_is_the_closed_form_of_the_chain():
    from rooflab.suite.ops.probes import ALPHA, _fma_chain, fma_chain_factor

    x = torch.randn(100, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for k in (1, 2, 7, 64):
        assert torch.allclose(_fma_chain(x, k, ALPHA), fma_chain_factor(k) * x, rtol=1e-14, atol=0)


def test_check_reports_shape_and_non_finite_values():
    op = get_op("add")
    prepared = op.prepare(make_case(op, "float32"), CPU, seed=0)
    out = prepared.fn()
    assert "shape" in present(prepared.check(out[:-1]))
    broken = out.clone()
    broken[3] = float("nan")
    assert "non-finite" in present(prepared.check(broken))


def test_matmul_check_samples_rows_and_catches_a_wrong_row():
    op = get_op("matmul")
    case = make_case(op, "float32", m=300, n=16, k=32)
    prepared = op.prepare(case, CPU, seed=0)
    out = prepared.fn().clone()
    assert prepared.check(out) is None
    out[:, 3] += 0.5  # a wrong column shows in every sampled row
    assert "sampled rows" in present(prepared.check(out))


def test_batched_matmul_runs_and_checks():
    op = get_op("matmul")
    case = make_case(op, "float32", batch=3)
    prepared = op.prepare(case, CPU, seed=0)
    out = prepared.fn()
    assert tuple(out.shape) == (3, 40, 24)
    assert prepared.check(out) is None
    wrong = out.clone()
    wrong[1:] *= 1.01
    assert prepared.check(wrong) is not None


# ---------------------------------------------------------------- skip reasons


def test_cupy_backend_is_skipped_with_a_reason():
    op = get_op("triad")
    reason = op.skip_reason(make_case(op, "float32", "cupy"), CPU)
    if cupy_module() is None:
        assert reason == "cupy is not installed"
    else:
        assert "CUDA" in present(reason)


def test_cuda_only_dtypes_and_graph_mode_are_skipped_on_the_cpu():
    mm = get_op("matmul")
    assert "CUDA" in present(mm.skip_reason(make_case(mm, "float8_e4m3fn", m=32, n=32, k=32), CPU))
    assert "CUDA" in present(mm.skip_reason(make_case(mm, "tf32"), CPU))
    launch = get_op("launch")
    assert (case_skip_reason(launch, make_case(launch, "float32", timing_mode="graph"), CPU)
            == "graph timing mode needs CUDA")
    assert case_skip_reason(launch, make_case(launch, "float32", timing_mode="launch"), CPU) is None


def test_can_this_case_run_here_is_decided_once():
    """The worker asks suite.ops.base.case_skip_reason: one answer and one message per case."""
    from rooflab.runners.orchestration.prepare import generic_skip_reason

    mm, layer = get_op("matmul"), get_op("transformer_block")
    cases = [
        (mm, Case("matmul", 1, "gemm", "no_such_backend", "float32", "hot", "launch", {"m": 8, "n": 8, "k": 8})),
        (mm, Case("matmul", 1, "gemm", "eager", "int4", "hot", "launch", {"m": 8, "n": 8, "k": 8})),
        (layer, Case(layer.name, layer.version, layer.family, "eager", "float32", "hot", "graph", {})),
        (mm, make_case(mm, "tf32")),
    ]
    for op, case in cases:
        reason = case_skip_reason(op, case, CPU)
        assert reason is not None and generic_skip_reason(op, case, CPU) == reason
    assert present(case_skip_reason(*cases[0], CPU)).startswith(
        "backend no_such_backend is not supported by matmul")
    assert present(case_skip_reason(*cases[2], CPU)).startswith(
        "timing mode graph is not supported by transformer_block")


def test_fp8_needs_compute_capability_8_9():
    mm = get_op("matmul")
    case = make_case(mm, "float8_e4m3fn", m=32, n=32, k=32)
    assert "8.9" in present(mm.skip_reason(case, FAKE_GPU))
    compiled = make_case(mm, "float8_e4m3fn", "compiled", m=32, n=32, k=32)
    assert "compiled backend supports only" in present(mm.skip_reason(compiled, FAKE_GPU))
    hopper = DeviceInfo("cuda", "fake H100", "cuda:0", 80 << 30, 50 << 20, (9, 0), 132)
    assert "16" in present(mm.skip_reason(make_case(mm, "float8_e4m3fn", m=30, n=32, k=32), hopper))
    assert "batch" in present(mm.skip_reason(make_case(mm, "float8_e4m3fn", m=32, n=32, k=32, batch=2), hopper))


def test_unsupported_backends_dtypes_and_params_are_skipped():
    softmax = get_op("softmax")
    assert "cupy" in present(case_skip_reason(softmax, make_case(softmax, "float32", "cupy"), CPU))
    assert "int8" in present(case_skip_reason(softmax, make_case(softmax, "int8"), CPU))
    bgdr = get_op("bias_gelu_dropout_residual")
    assert "multiple" in present(bgdr.skip_reason(make_case(bgdr, "float32", n=1000, hidden=64), CPU))
    fma = get_op("fma_intensity")
    assert "k must be" in present(fma.skip_reason(make_case(fma, "float32", "compiled", k=5000), CPU))
    assert ("backend eager is not supported by fma_intensity"
            in present(case_skip_reason(fma, make_case(fma, "float32", "eager"), CPU)))
    att = get_op("attention")
    reason = att.skip_reason(make_case(att, "float32", "compiled", kernel="sdpa_math"), CPU)
    assert "naive" in present(reason)


def test_sdpa_backend_unavailable_on_the_cpu_is_skipped_with_torchs_reason():
    att = get_op("attention")
    reason = att.skip_reason(make_case(att, "float32", kernel="sdpa_cudnn"), CPU)
    assert reason and reason.startswith("sdpa_cudnn cannot run")
    assert att.skip_reason(make_case(att, "float32", kernel="sdpa_math"), CPU) is None


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_naive_attention_with_16_bit_scores_passes_its_check_at_realistic_sizes(dtype, causal):
    """naive rounds the scores to 16 bits (a head_dim 128 product before scaling): the check allows
    for that rounding, and still catches an output that is a few percent off."""
    att = get_op("attention")
    for seed in (1, 2, 3):
        case = make_case(att, dtype, kernel="naive", causal=causal, head_dim=128, seq_q=256, seq_k=256)
        prepared = att.prepare(case, CPU, seed=seed)
        output = prepared.fn()
        assert prepared.check(output) is None
        assert prepared.check(as_torch(output) * 1.08) is not None


def test_cases_that_do_not_fit_are_skipped_before_allocation():
    mm = get_op("matmul")
    tiny = DeviceInfo("cpu", "tiny", "cpu", memory_bytes=1 << 20, l2_bytes=1 << 16)
    reason = case_skip_reason(mm, make_case(mm, "float32", m=1024, n=1024, k=1024), tiny)
    assert reason and reason == "would not fit: needs 20.00 MiB, more than the device's 1.00 MiB"
    case = Case("matmul", 1, "gemm", "eager", "float32", "cold", "launch", {"m": 64, "n": 64, "k": 64},
                max_memory_fraction=1e-6)
    assert "more than max_memory_fraction 1e-06" in present(case_skip_reason(mm, case, CPU))


def test_fp8_scaled_matmul_path_and_check_work_where_torch_runs_them():
    """The CPU skips float8 cases (they are measured on GPUs with cc >= 8.9), but torch's CPU
    _scaled_mm lets the quantisation, the call and the check be exercised here."""
    if not hasattr(torch, "_scaled_mm"):
        pytest.skip("this torch has no torch._scaled_mm")
    op = get_op("matmul")
    case = make_case(op, "float8_e4m3fn", m=64, n=32, k=48)
    try:
        prepared = op.prepare(case, CPU, seed=0)
        out = prepared.fn()
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"torch cannot run _scaled_mm on this CPU: {exc}")
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (64, 32)
    assert prepared.check(out) is None
    for label, wrong in planted_outputs(out, "bfloat16").items():
        assert prepared.check(wrong), label
