"""Ops on a CUDA GPU: every SDPA backend, float8 scaled matmul, the CuPy kernels, and CUDA-graph
capture of every op that declares itself graph-safe. Run with `make test-gpu`."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.common import as_torch, cupy_module
from rooflab.suite.ops.registry import all_ops, get_op
from tests.cuda_device import cuda_device
from tests.present import present
from tests.suite.test_ops import planted_outputs, small_params

pytestmark = pytest.mark.gpu

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_cupy = pytest.mark.skipif(cupy_module() is None, reason="cupy is not installed")


def gpu_case(name: str, backend: str, dtype: str, timing_mode: str = "launch", **extra) -> Case:
    op = get_op(name)
    return Case(name, op.version, op.family, backend, dtype, "cold", timing_mode, small_params(op, **extra))


def run_and_check(case: Case, device: DeviceInfo, *, sampled: bool = False) -> None:
    """Run the case twice and check both outputs, then check planted faults. `sampled`: the case is
    larger than what its check compares (matmul: CHECK_ROWS rows; attention: CHECK_ROWS query rows
    of CHECK_PAIRS heads), so a fault in one element may lie outside the sample by design; only the
    fault spread over every element must then be caught (the CPU tests check one-element faults at
    sizes the check covers in full)."""
    op = get_op(case.op)
    reason = op.skip_reason(case, device)
    if reason:
        pytest.skip(reason)
    prepared = op.prepare(case, device, seed=1)
    output = prepared.fn()
    torch.cuda.synchronize()
    assert prepared.check(output) is None
    output = prepared.fn()
    torch.cuda.synchronize()
    assert prepared.check(output) is None
    for label, wrong in planted_outputs(
            as_torch(output), case.dtype if not case.dtype.startswith("float8") else "bfloat16").items():
        if sampled and label == "one element":
            continue
        assert prepared.check(wrong), f"planted fault ({label}) not caught"


def shipped(op: object) -> bool:
    """An op rooflab ships, not a test plugin: `pytest -m gpu tests` imports every test module, and
    one of them registers the planted ops (planted_exit ends the process that calls it: pytest exited
    with code 3 after 68 tests on an H100 when they were collected here)."""
    return type(op).__module__.startswith("rooflab.")


EAGER_RUNS = [
    (name, dtype)
    for name, op in sorted(all_ops().items())
    if shipped(op) and "eager" in op.backends
    for dtype in op.dtypes
]


@needs_cuda
@pytest.mark.parametrize("name, dtype", EAGER_RUNS)
def test_eager_ops_on_cuda(name, dtype):
    run_and_check(gpu_case(name, "eager", dtype), cuda_device())


@needs_cuda
@pytest.mark.parametrize("name",
                         ["cos_cos", "bias_gelu_dropout_residual", "softmax", "matmul_bias_gelu", "fma_intensity"])
def test_compiled_ops_on_cuda(name):
    run_and_check(gpu_case(name, "compiled", "float16"), cuda_device())


@needs_cuda
@pytest.mark.parametrize("kernel", ["sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math", "naive"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_attention_kernels_on_cuda(kernel, dtype, causal, head_dim):
    device = cuda_device()
    case = gpu_case("attention", "eager", dtype, kernel=kernel, causal=causal, head_dim=head_dim,
                    seq_q=256, seq_k=256)
    reason = get_op("attention").skip_reason(case, device)
    ampere_or_newer = present(device.compute_capability) >= (8, 0)
    if kernel in ("sdpa_flash", "sdpa_efficient") and dtype != "float32" and ampere_or_newer:
        assert reason is None, reason  # these backends exist on every Ampere or newer GPU
    if kernel == "sdpa_flash" and dtype == "float32":
        assert reason and reason.startswith("sdpa_flash cannot run")
    run_and_check(case, device, sampled=True)  # 256 query rows, 32 of them checked


@needs_cuda
def test_naive_attention_compiled_on_cuda():
    run_and_check(gpu_case("attention", "compiled", "float16", kernel="naive", causal=True), cuda_device())


@needs_cuda
@pytest.mark.parametrize("dtype", ["tf32", "float8_e4m3fn"])
def test_tensor_core_dtypes(dtype):
    device = cuda_device()
    case = gpu_case("matmul", "eager", dtype, m=256, n=128, k=512)
    if dtype == "float8_e4m3fn" and present(device.compute_capability) < (8, 9):
        assert "8.9" in present(get_op("matmul").skip_reason(case, device))
        return
    run_and_check(case, device, sampled=True)  # 256 rows of C, 64 of them checked


@needs_cuda
def test_tf32_is_used_for_tf32_only():
    device = cuda_device()
    if present(device.compute_capability) < (8, 0):
        pytest.skip("no TF32 before compute capability 8.0")
    op = get_op("matmul")
    big: dict[str, Any] = dict(m=512, n=512, k=4096)
    before = torch.get_float32_matmul_precision()
    ieee = op.prepare(gpu_case("matmul", "eager", "float32", **big), device, seed=3)
    tf32 = op.prepare(gpu_case("matmul", "eager", "tf32", **big), device, seed=3)  # same inputs
    out32, out_tf = ieee.fn().clone(), tf32.fn().clone()
    assert ieee.check(out32) is None and tf32.check(out_tf) is None
    assert not torch.equal(out32, out_tf)  # TF32 rounds the operands, IEEE float32 does not
    assert torch.get_float32_matmul_precision() == before  # restored after the calls


@needs_cuda
@needs_cupy
@pytest.mark.parametrize("name", ["copy", "scale", "add", "triad", "gelu", "cos_cos"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_cupy_pointwise_kernels(name, dtype):
    run_and_check(gpu_case(name, "cupy", dtype), cuda_device())


@needs_cuda
@needs_cupy
@pytest.mark.parametrize("name", ["stream_copy", "stream_scale", "stream_add", "stream_triad", "stream_dot"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_cupy_stream_kernels(name, dtype):
    run_and_check(gpu_case(name, "cupy", dtype, n=(1 << 20) + 3), cuda_device())


@needs_cuda
@needs_cupy
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("k", [1, 8, 64, 1024])
def test_cupy_fma_kernels(dtype, k):
    # odd n exercises the scalar tail of the packed 16-bit kernels
    run_and_check(gpu_case("fma_intensity", "cupy", dtype, n=(1 << 18) + 1, k=k), cuda_device())


@needs_cuda
@needs_cupy
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_cupy_matmul_and_launch(dtype):
    device = cuda_device()
    run_and_check(gpu_case("matmul", "cupy", dtype), device)
    run_and_check(gpu_case("launch", "cupy", dtype), device)


GRAPH_RUNS = [
    ("copy", "eager", "float32", {}), ("cos_cos", "eager", "float16", {}), ("cos_cos", "compiled", "float16", {}),
    ("bias_gelu_dropout_residual", "eager", "float16", {}), ("sum", "eager", "float32", {}),
    ("softmax", "compiled", "float16", {}), ("layernorm", "eager", "bfloat16", {}), ("rmsnorm", "eager", "float16", {}),
    ("matmul", "eager", "bfloat16", {}), ("matmul", "eager", "tf32", {}),
    ("matmul_bias_gelu", "compiled", "float16", {}),
    ("attention", "eager", "float16", {"kernel": "sdpa_flash"}),
    ("attention", "eager", "float16", {"kernel": "naive", "causal": True}),
    ("launch", "eager", "float32", {}), ("launch", "cupy", "float32", {}), ("stream_triad", "cupy", "float32", {}),
    ("stream_dot", "cupy", "float32", {}), ("stream_dot", "eager", "float32", {}),
    ("fma_intensity", "cupy", "bfloat16", {}),
    ("gelu", "cupy", "float16", {}),
]


@needs_cuda
@pytest.mark.parametrize("name, backend, dtype, extra", GRAPH_RUNS)
def test_graph_safe_ops_replay_correctly_from_a_cuda_graph(name, backend, dtype, extra):
    device = cuda_device()
    op = get_op(name)
    case = gpu_case(name, backend, dtype, timing_mode="graph", **extra)
    reason = op.skip_reason(case, device)
    if reason:
        pytest.skip(reason)
    prepared = op.prepare(case, device, seed=4)
    if not prepared.graph_safe:
        pytest.skip("the op declares itself not graph-safe")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            prepared.fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = prepared.fn()
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    assert prepared.check(output) is None
