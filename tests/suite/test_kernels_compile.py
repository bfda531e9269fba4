"""Every CuPy RawKernel source of the suite compiles with nvcc for sm_90 (compile only, no GPU).

All instantiations go into one translation unit (their names are distinct), so one nvcc run
checks them all; the PTX must then contain every kernel entry point. NVRTC, which CuPy uses at
run time, is tested in test_kernels_nvrtc.py.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable

import pytest

from rooflab.suite.ops import cuda_sources

NVCC = shutil.which("nvcc") or ""  # "" without one: then every test here is skipped
NO_IMPLICIT_16BIT = (
    "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_OPERATORS__",
)
VECTOR_16_BYTES = r"\.(v4\.[ubf]32|v2\.[ubf]64)\s"  # a 16-byte vector access in PTX
pytestmark = pytest.mark.skipif(not NVCC, reason="nvcc is not on the PATH")
FMA_K = 16  # the chain length of the FMA sources compiled on their own
Compiled = tuple[int, str, str]  # nvcc's exit status, the tail of its stderr, the PTX ("" on failure)


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Compiled]:
    """A source compiled on its own (alone in its translation unit): ("fma", dtype)
    at k = FMA_K or ("stream", dtype). Each is compiled once (an nvcc run costs about a second of
    CPU); the tests that read its PTX share it."""
    folder = tmp_path_factory.mktemp("alone")
    done: dict[tuple[str, str], Compiled] = {}

    def compile_alone(kind: str, dtype: str) -> Compiled:
        if (kind, dtype) not in done:
            source = cuda_sources.fma_source(dtype, FMA_K) if kind == "fma" else cuda_sources.stream_source(dtype)
            cu = folder / f"{kind}_{dtype}.cu"
            cu.write_text(source)
            ptx = cu.with_suffix(".ptx")
            run = subprocess.run([NVCC, "-arch=sm_90", "--ptx", str(cu), "-o", str(ptx)], capture_output=True,
                                 text=True, timeout=120)
            done[(kind, dtype)] = (run.returncode, run.stderr[-2000:], ptx.read_text() if run.returncode == 0 else "")
        return done[(kind, dtype)]

    return compile_alone


def _kernel_names(source: str) -> list[str]:
    return re.findall(r'extern "C" __global__ void (\w+)\(', source)


def test_all_kernel_instantiations_compile_to_ptx(tmp_path):
    sources = cuda_sources.all_instantiations()
    unit = "\n".join(sources.values())
    cu = tmp_path / "rooflab_kernels.cu"
    cu.write_text(unit)
    ptx = tmp_path / "rooflab_kernels.ptx"
    done = subprocess.run(
        # the no-conversion macros prove that 16-bit values are converted only by intrinsics
        [NVCC, "-arch=sm_90", "--ptx", "-std=c++17", *NO_IMPLICIT_16BIT, str(cu), "-o", str(ptx)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    text = ptx.read_text()
    names = [name for src in sources.values() for name in _kernel_names(src)]
    assert len(names) == len(set(names)), "kernel names must be unique"
    for name in names:
        assert f".entry {name}(" in text, f"{name} missing from the PTX"


def test_every_dtype_and_chain_length_has_a_kernel():
    sources = cuda_sources.all_instantiations(fma_ks=(1, 1024))
    for dtype in cuda_sources.FMA_DTYPES:
        for k in (1, 1024):
            name = cuda_sources.fma_kernel_name(dtype, k)
            assert name in _kernel_names(sources[name])
    for dtype in cuda_sources.STREAM_DTYPES:
        names = _kernel_names(sources[f"stream_{dtype}"])
        for kind in ("copy", "scale", "add", "triad", "dot", "fill"):
            assert cuda_sources.stream_kernel_name(kind, dtype) in names


def test_fma_chain_length_is_unrolled_into_the_kernel():
    src = cuda_sources.fma_source("float32", 16)
    assert "j < 16" in src
    with pytest.raises(ValueError):
        cuda_sources.fma_source("float32", 0)


@pytest.mark.parametrize("dtype", cuda_sources.FMA_DTYPES)
def test_each_source_compiles_on_its_own_without_headers(alone: Callable[[str, str], Compiled], dtype: str) -> None:
    assert "#include" not in cuda_sources.fma_source(dtype, FMA_K)
    returncode, stderr, _ = alone("fma", dtype)
    assert returncode == 0, stderr
    if dtype in cuda_sources.STREAM_DTYPES:
        assert "#include" not in cuda_sources.stream_source(dtype)
        returncode, stderr, _ = alone("stream", dtype)
        assert returncode == 0, stderr


def test_fma_chain_float32_ptx_has_k_fmas(alone: Callable[[str, str], Compiled]) -> None:
    returncode, stderr, text = alone("fma", "float32")
    assert returncode == 0, stderr
    # nvcc may also unroll the grid-stride loop (copies of the whole chain), never shorten the chain
    count = text.count("fma.rn.f32")
    assert count >= FMA_K and count % FMA_K == 0, count


def test_cupy_elementwise_bodies_compile_for_float_and_double(tmp_path):
    """The ElementwiseKernel bodies of the pointwise ops, wrapped the way CuPy wraps them (one
    element per thread, inputs const, outputs by reference), compile for float and double."""
    from rooflab.suite.ops.registry import all_ops

    pieces = []
    for op in all_ops().values():
        spec = getattr(op, "cupy_kernel", None)
        if not spec or "cupy" not in op.backends:
            continue
        in_params, out_params, body = spec
        for ctype in ("float", "double"):
            ins = [p.split()[1] for p in in_params.split(",")]
            outs = [p.split()[1] for p in out_params.split(",")]
            args = ", ".join([f"const T* {n}_" for n in ins] + [f"T* {n}_" for n in outs] + ["long long n"])
            loads = " ".join(f"const T {n} = {n}_[i];" for n in ins)
            refs = " ".join(f"T& {n} = {n}_[i];" for n in outs)
            pieces.append(
                f"namespace {op.name}_{ctype} {{ typedef {ctype} T;\n"
                f"__global__ void k({args}) {{ const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
                f"if (i >= n) return; {loads} {refs}\n{body.format(C=ctype)}; }} }}\n"
            )
    assert len(pieces) >= 12  # copy, scale, add, triad, gelu, cos_cos in two types
    cu = tmp_path / "elementwise.cu"
    cu.write_text("\n".join(pieces))
    done = subprocess.run([NVCC, "-arch=sm_90", "--ptx", str(cu), "-o", str(cu.with_suffix(".ptx"))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("dtype", cuda_sources.STREAM_DTYPES)
def test_stream_kernels_load_and_store_16_bytes_at_a_time(alone: Callable[[str, str], Compiled], dtype: str) -> None:
    returncode, stderr, text = alone("stream", dtype)
    assert returncode == 0, stderr
    for kind in ("copy", "scale", "add", "triad", "dot"):
        name = cuda_sources.stream_kernel_name(kind, dtype)
        body = text[text.index(f".entry {name}("):]
        body = body[: body.index("\n}\n")]
        assert re.search(r"ld\.global(\.nc)?" + VECTOR_16_BYTES, body), f"{name}: no 16-byte load"
        if kind != "dot":
            assert re.search(r"st\.global" + VECTOR_16_BYTES, body), f"{name}: no 16-byte store"


@pytest.mark.parametrize("dtype, instruction", [("float16", "fma.rn.f16x2"), ("bfloat16", "fma.rn.bf16x2")])
def test_fma_chain_16_bit_ptx_has_k_packed_fmas(alone: Callable[[str, str], Compiled], dtype: str,
                                                instruction: str) -> None:
    returncode, stderr, text = alone("fma", dtype)
    assert returncode == 0, stderr
    count = text.count(instruction + " ")
    assert count >= FMA_K and count % FMA_K == 0, count
    assert text.count(instruction.replace("x2", "") + " ") >= FMA_K  # the scalar chain of an odd n's last element
