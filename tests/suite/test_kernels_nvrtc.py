"""Every CuPy RawKernel source compiles with NVRTC the way CuPy compiles it at run time: one
program per source, no include path, for sm_90 (compile only, no GPU).

NVRTC comes from PyPI (`cuda-bindings` for the Python API, `nvidia-cuda-nvrtc` for the library:
the `dev` extras); the test skips, saying so, where they are not installed. Under CUDA 13 NVRTC
does not find cuda_fp16.h / cuda_bf16.h on its own, so this is the test that fails for a source
that includes them.
"""
from __future__ import annotations

import re

import pytest

from rooflab.suite.ops import cuda_sources

nvrtc = pytest.importorskip(
    "cuda.bindings.nvrtc",
    reason="NVRTC Python bindings not installed (pip install -e '.[dev]': cuda-bindings, nvidia-cuda-nvrtc)"
)

ARCH = b"--gpu-architecture=compute_90"  # CuPy passes the device's arch; the suite's floor for bf16 is sm_80


def _check(result: tuple) -> tuple:
    err, *rest = result
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"NVRTC error {err}"
    return tuple(rest)


def compile_with_nvrtc(source: str, name: str) -> tuple[bool, str, str]:
    """(ok, log, ptx) of one NVRTC program with CuPy's options and no include path."""
    try:
        (prog,) = _check(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []))
    except (RuntimeError, OSError) as exc:  # the library itself could not be loaded
        pytest.skip(f"NVRTC library not loadable: {exc}")
    options = [ARCH, b"--std=c++17"]
    err, = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    (log_size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog))
    log = b" " * log_size
    _check(nvrtc.nvrtcGetProgramLog(prog, log))
    ptx_text = ""
    if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:
        (ptx_size,) = _check(nvrtc.nvrtcGetPTXSize(prog))
        ptx = b" " * ptx_size
        _check(nvrtc.nvrtcGetPTX(prog, ptx))
        ptx_text = ptx.decode(errors="replace")
    _check(nvrtc.nvrtcDestroyProgram(prog))
    return err == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace").rstrip("\x00 "), ptx_text


SOURCES = cuda_sources.all_instantiations(fma_ks=(1, 8, 1024))


@pytest.mark.parametrize("label", sorted(SOURCES))
def test_every_instantiation_compiles_with_nvrtc_without_headers(label: str) -> None:
    source = SOURCES[label]
    assert "#include" not in source
    ok, log, ptx = compile_with_nvrtc(source, label)
    assert ok, log[-3000:]
    for name in re.findall(r'extern "C" __global__ void (\w+)\(', source):
        assert f".entry {name}(" in ptx, f"{name} missing from the PTX"


def test_a_source_that_includes_cuda_fp16_fails_under_nvrtc_without_an_include_path() -> None:
    """What the suite's sources used to do: the planted include must be caught here."""
    ok, log, _ = compile_with_nvrtc("#include <cuda_fp16.h>\n" + cuda_sources.launch_source("float32"), "planted")
    assert not ok and "cuda_fp16.h" in log
