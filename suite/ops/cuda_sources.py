"""CUDA C++ sources of the suite's CuPy RawKernels, as plain templates.

Each source is instantiated by string substitution (string.Template: ${T}, ${K}, ...) so that a
CPU-only test can compile every instantiation with `nvcc --ptx` and catch errors before a GPU
run. Kernels are `extern "C"` with names that spell their instantiation, grid-stride loops, and
write every result so that nothing can be optimised away.
"""
from __future__ import annotations

from dataclasses import dataclass
from string import Template

# Each source includes only the header its type needs, so a missing cuda_bf16.h (NVRTC finds the
# 16-bit headers through CuPy's or the toolkit's include path) can only affect bfloat16 kernels.
HEADERS = {
    "float64": "",
    "float32": "",
    "float16": "#include <cuda_fp16.h>\n",
    "bfloat16": "#include <cuda_bf16.h>\n",
}
ALL_HEADERS = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"


def strip_includes(source: str) -> str:
    """`source` without its #include lines (to join several sources into one unit)."""
    return "\n".join(line for line in source.splitlines() if not line.startswith("#include"))


@dataclass(frozen=True)
class CType:
    """How a suite dtype is spelled in CUDA C++."""

    dtype: str
    ctype: str  # storage type
    acc: str  # arithmetic / accumulation type of the stream kernels
    vec2: str | None  # packed pair type for the FMA probe (half2, bfloat162), None for scalar code
    splat2: str | None  # float -> packed pair
    load: str = ""  # storage -> acc conversion (an intrinsic, so no implicit conversion is needed)
    store: str = ""  # acc -> storage conversion (round to nearest)


CTYPES = {
    "float64": CType("float64", "double", "double", None, None),
    "float32": CType("float32", "float", "float", None, None),
    "float16": CType("float16", "__half", "float", "__half2", "__float2half2_rn", "__half2float", "__float2half_rn"),
    "bfloat16": CType(
        "bfloat16", "__nv_bfloat16", "float", "__nv_bfloat162", "__float2bfloat162_rn", "__bfloat162float",
        "__float2bfloat16_rn",
    ),
}

# ------------------------------------------------------------------ BabelStream kernels
# copy c = a; scale b = q*c; add c = a + b; triad a = b + q*c; dot sum(a*b) (block partial sums,
# then one block adds the partials).

STREAM_TEMPLATE = Template(
    """
extern "C" __global__ void stream_copy_${NAME}(const ${T}* __restrict__ a, ${T}* __restrict__ c, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) c[i] = a[i];
}

extern "C" __global__ void stream_scale_${NAME}(const ${T}* __restrict__ c, ${T}* __restrict__ b, long long n, ${ACC} q) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        b[i] = ${STORE}(q * ${LOAD}(c[i]));
}

extern "C" __global__ void stream_add_${NAME}(const ${T}* __restrict__ a, const ${T}* __restrict__ b, ${T}* __restrict__ c, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        c[i] = ${STORE}(${LOAD}(a[i]) + ${LOAD}(b[i]));
}

extern "C" __global__ void stream_triad_${NAME}(const ${T}* __restrict__ b, const ${T}* __restrict__ c, ${T}* __restrict__ a, long long n, ${ACC} q) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        a[i] = ${STORE}(${LOAD}(b[i]) + q * ${LOAD}(c[i]));
}

// blockDim.x must be ${DOT_THREADS}; partial[blockIdx.x] receives the block's sum.
extern "C" __global__ void stream_dot_${NAME}(const ${T}* __restrict__ a, const ${T}* __restrict__ b, ${ACC}* __restrict__ partial, long long n) {
    __shared__ ${ACC} tile[${DOT_THREADS}];
    const long long stride = (long long)gridDim.x * blockDim.x;
    ${ACC} sum = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        sum += ${LOAD}(a[i]) * ${LOAD}(b[i]);
    tile[threadIdx.x] = sum;
    for (int offset = blockDim.x / 2; offset > 0; offset /= 2) {
        __syncthreads();
        if (threadIdx.x < offset) tile[threadIdx.x] += tile[threadIdx.x + offset];
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = tile[0];
}

// one block of ${DOT_THREADS} threads: out[0] = sum of partial[0..count)
extern "C" __global__ void stream_dot_final_${NAME}(const ${ACC}* __restrict__ partial, ${ACC}* __restrict__ out, int count) {
    __shared__ ${ACC} tile[${DOT_THREADS}];
    ${ACC} sum = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
    tile[threadIdx.x] = sum;
    for (int offset = blockDim.x / 2; offset > 0; offset /= 2) {
        __syncthreads();
        if (threadIdx.x < offset) tile[threadIdx.x] += tile[threadIdx.x + offset];
    }
    if (threadIdx.x == 0) out[0] = tile[0];
}
"""
)
STREAM_THREADS = 256  # threads per block of the stream kernels (BabelStream's TBSIZE)
DOT_THREADS = 1024  # threads per block of the dot kernels (BabelStream's DOT_NUM_THREADS)
STREAM_DTYPES = ("float64", "float32", "float16")  # dtypes CuPy has arrays for


def stream_source(dtype: str) -> str:
    """All stream kernels for one dtype; names end in `_<dtype>`."""
    ct = CTYPES[dtype]
    body = STREAM_TEMPLATE.substitute(
        NAME=dtype, T=ct.ctype, ACC=ct.acc, LOAD=ct.load, STORE=ct.store, DOT_THREADS=DOT_THREADS
    )
    return HEADERS[dtype] + body


def stream_kernel_name(kind: str, dtype: str) -> str:
    return f"stream_{kind}_{dtype}"


# ------------------------------------------------------------------ FMA intensity (ERT/mixbench style)
# y[i] = b_K with b_0 = x[i] and b_j = fma(b_{j-1}, alpha, x[i]): K dependent FMAs per element
# loaded, one store. With |alpha| < 1 the chain stays bounded (it tends to x / (1 - alpha)), and
# alpha is a kernel argument, so the compiler can neither fold nor drop the chain.

FMA_SCALAR_TEMPLATE = Template(
    """
extern "C" __global__ void ${NAME}(const ${T}* __restrict__ x, ${T}* __restrict__ y, long long n, ${T} alpha) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const ${T} xi = x[i];
        ${T} b = xi;
#pragma unroll
        for (int j = 0; j < ${K}; ++j) b = ${FMA}(b, alpha, xi);
        y[i] = b;
    }
}
"""
)

# 16-bit types: two lanes per thread with packed FMAs (__hfma2), as mixbench does with half2;
# the last element of an odd n is done by one thread with the scalar __hfma.
FMA_PAIR_TEMPLATE = Template(
    """
extern "C" __global__ void ${NAME}(const ${T}* __restrict__ x, ${T}* __restrict__ y, long long n, float alpha_in) {
    const ${T2} alpha = ${SPLAT2}(alpha_in);
    const ${T2}* __restrict__ x2 = reinterpret_cast<const ${T2}*>(x);
    ${T2}* __restrict__ y2 = reinterpret_cast<${T2}*>(y);
    const long long pairs = n / 2;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = first; i < pairs; i += stride) {
        const ${T2} xi = x2[i];
        ${T2} b = xi;
#pragma unroll
        for (int j = 0; j < ${K}; ++j) b = __hfma2(b, alpha, xi);
        y2[i] = b;
    }
    if ((n & 1) && first == 0) {
        const ${T} a1 = alpha.x;
        const ${T} xi = x[n - 1];
        ${T} b = xi;
#pragma unroll
        for (int j = 0; j < ${K}; ++j) b = __hfma(b, a1, xi);
        y[n - 1] = b;
    }
}
"""
)
FMA_THREADS = 256
FMA_DTYPES = ("float64", "float32", "float16", "bfloat16")


def fma_kernel_name(dtype: str, k: int) -> str:
    return f"fma_chain_{dtype}_k{int(k)}"


def fma_source(dtype: str, k: int) -> str:
    """The FMA-chain kernel for one dtype and chain length k (k >= 1)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ct = CTYPES[dtype]
    name = fma_kernel_name(dtype, k)
    if ct.vec2 is None:
        fma = "fma" if dtype == "float64" else "fmaf"
        body = FMA_SCALAR_TEMPLATE.substitute(NAME=name, T=ct.ctype, K=int(k), FMA=fma)
    else:
        body = FMA_PAIR_TEMPLATE.substitute(NAME=name, T=ct.ctype, T2=ct.vec2, SPLAT2=ct.splat2, K=int(k))
    return HEADERS[dtype] + body


# ------------------------------------------------------------------ launch overhead
# The smallest useful kernel: y[i] = x[i] + 1 for i < n (n is tiny).

LAUNCH_TEMPLATE = Template(
    """
extern "C" __global__ void ${NAME}(const ${T}* __restrict__ x, ${T}* __restrict__ y, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = ${STORE}(${LOAD}(x[i]) + (${ACC})1);
}
"""
)


def launch_kernel_name(dtype: str) -> str:
    return f"tiny_add_one_{dtype}"


def launch_source(dtype: str) -> str:
    ct = CTYPES[dtype]
    return HEADERS[dtype] + LAUNCH_TEMPLATE.substitute(
        NAME=launch_kernel_name(dtype), T=ct.ctype, ACC=ct.acc, LOAD=ct.load, STORE=ct.store
    )


def all_instantiations(fma_ks: tuple[int, ...] = (1, 2, 8, 64, 256, 1024)) -> dict[str, str]:
    """Every source the suite compiles, keyed by a label (for the compile test)."""
    out: dict[str, str] = {}
    for dtype in STREAM_DTYPES:
        out[f"stream_{dtype}"] = stream_source(dtype)
        out[f"launch_{dtype}"] = launch_source(dtype)
    for dtype in FMA_DTYPES:
        for k in fma_ks:
            out[fma_kernel_name(dtype, k)] = fma_source(dtype, k)
    return out
