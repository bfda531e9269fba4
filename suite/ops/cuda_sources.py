"""CUDA C++ sources of the suite's CuPy RawKernels, as plain templates.

Each source is instantiated by string substitution (string.Template: ${T}, ${K}, ...) so that a
CPU-only test can compile every instantiation, with NVRTC as CuPy does at run time and with
`nvcc --ptx`, before a GPU run. Kernels are `extern "C"` with names that spell their
instantiation, grid-stride loops, and write every result so that nothing can be optimised away.

No source includes a header. NVRTC under CUDA 13 need not find `cuda_fp16.h` / `cuda_bf16.h`
(CuPy no longer ships them, and `cuda_fp16.hpp` needs `<nv/target>` from CCCL), so 16-bit values
are kept as their raw bits (`unsigned short`, pairs as `unsigned int`) and converted or computed
with the PTX instructions the CUDA headers themselves use: `cvt.f32.f16`, `cvt.rn.f16.f32`,
`cvt.rn.bf16.f32`, `fma.rn.f16x2`, `fma.rn.bf16x2` (bfloat16 to float is exact: the bits shifted
up by 16). The bfloat16 instructions need sm_80 or newer, the float16 ones sm_53.

The stream kernels move 16 bytes per access (`uint4`: 2 doubles, 4 floats or 8 halves per load
and store), the width that lets a kernel reach HBM peak with few loads in flight per thread; the
last n mod (16 / element size) elements, or every element when a pointer is not 16-byte aligned,
go through a scalar loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from string import Template


@dataclass(frozen=True)
class CType:
    """How a suite dtype is spelled in CUDA C++ (without headers)."""

    dtype: str
    ctype: str  # storage type: the raw bits for 16-bit types
    acc: str  # arithmetic / accumulation type of the stream kernels
    vec2: str | None  # packed pair storage for the FMA probe (two 16-bit values), None for scalar code
    ptx: str | None  # PTX type of the 16-bit arithmetic ("f16", "bf16"), None for float/double
    load: str  # body of `acc load(elem x)`: storage -> acc, exact
    store: str  # body of `elem store(acc x)`: acc -> storage, round to nearest even


CTYPES = {
    "float64": CType("float64", "double", "double", None, None, "return x;", "return x;"),
    "float32": CType("float32", "float", "float", None, None, "return x;", "return x;"),
    "float16": CType(
        "float16", "unsigned short", "float", "unsigned int", "f16",
        'float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f;',
        'unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h;',
    ),
    "bfloat16": CType(
        "bfloat16", "unsigned short", "float", "unsigned int", "bf16",
        "return __uint_as_float(((unsigned int)x) << 16);",
        'unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h;',
    ),
}
VECTOR_BYTES = 16  # bytes per vector access of the stream kernels (uint4)


def vector_elements(dtype: str) -> int:
    """Elements of `dtype` in one 16-byte access."""
    size = {"double": 8, "float": 4, "unsigned short": 2}[CTYPES[dtype].ctype]
    return VECTOR_BYTES // size


# helpers of one instantiation, in a namespace of its own so that several sources join in one unit
HELPERS_TEMPLATE = Template(
    """
namespace rl_${NAME} {
typedef ${T} elem;
typedef ${ACC} acc;
const int V = ${V};  // elements per 16-byte access
union pack { uint4 u; elem e[${V}]; };
__device__ __forceinline__ acc load(elem x) { ${LOAD} }
__device__ __forceinline__ elem store(acc x) { ${STORE} }
__device__ __forceinline__ bool aligned16(const void* p) { return (((unsigned long long)p) & 15ull) == 0; }
}
"""
)


def helpers(name: str, dtype: str) -> str:
    ct = CTYPES[dtype]
    return HELPERS_TEMPLATE.substitute(
        NAME=name, T=ct.ctype, ACC=ct.acc, V=vector_elements(dtype), LOAD=ct.load, STORE=ct.store
    )


# ------------------------------------------------------------------ BabelStream kernels
# copy c = a; scale b = q*c; add c = a + b; triad a = b + q*c; dot sum(a*b) (block partial sums,
# then one block adds the partials); fill a = q (writes only). Each: a vector loop over the n / V
# whole 16-byte groups when every pointer is 16-byte aligned, then a scalar loop over the rest.

STREAM_TEMPLATE = Template(
    """
extern "C" __global__ void stream_copy_${NAME}(const ${T}* __restrict__ a, ${T}* __restrict__ c, long long n) {
    using namespace rl_${NAME};
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long done = 0;
    if (aligned16(a) && aligned16(c)) {
        const long long groups = n / V;
        const uint4* __restrict__ av = reinterpret_cast<const uint4*>(a);
        uint4* __restrict__ cv = reinterpret_cast<uint4*>(c);
        for (long long i = first; i < groups; i += stride) cv[i] = av[i];
        done = groups * V;
    }
    for (long long i = done + first; i < n; i += stride) c[i] = a[i];
}

extern "C" __global__ void stream_scale_${NAME}(const ${T}* __restrict__ c, ${T}* __restrict__ b, long long n,
                                                ${ACC} q) {
    using namespace rl_${NAME};
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long done = 0;
    if (aligned16(c) && aligned16(b)) {
        const long long groups = n / V;
        const uint4* __restrict__ cv = reinterpret_cast<const uint4*>(c);
        uint4* __restrict__ bv = reinterpret_cast<uint4*>(b);
        for (long long i = first; i < groups; i += stride) {
            pack x, y;
            x.u = cv[i];
#pragma unroll
            for (int j = 0; j < V; ++j) y.e[j] = store(q * load(x.e[j]));
            bv[i] = y.u;
        }
        done = groups * V;
    }
    for (long long i = done + first; i < n; i += stride) b[i] = store(q * load(c[i]));
}

extern "C" __global__ void stream_add_${NAME}(const ${T}* __restrict__ a, const ${T}* __restrict__ b,
                                              ${T}* __restrict__ c, long long n) {
    using namespace rl_${NAME};
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long done = 0;
    if (aligned16(a) && aligned16(b) && aligned16(c)) {
        const long long groups = n / V;
        const uint4* __restrict__ av = reinterpret_cast<const uint4*>(a);
        const uint4* __restrict__ bv = reinterpret_cast<const uint4*>(b);
        uint4* __restrict__ cv = reinterpret_cast<uint4*>(c);
        for (long long i = first; i < groups; i += stride) {
            pack x, y, z;
            x.u = av[i];
            y.u = bv[i];
#pragma unroll
            for (int j = 0; j < V; ++j) z.e[j] = store(load(x.e[j]) + load(y.e[j]));
            cv[i] = z.u;
        }
        done = groups * V;
    }
    for (long long i = done + first; i < n; i += stride) c[i] = store(load(a[i]) + load(b[i]));
}

extern "C" __global__ void stream_triad_${NAME}(const ${T}* __restrict__ b, const ${T}* __restrict__ c,
                                                ${T}* __restrict__ a, long long n, ${ACC} q) {
    using namespace rl_${NAME};
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long done = 0;
    if (aligned16(a) && aligned16(b) && aligned16(c)) {
        const long long groups = n / V;
        const uint4* __restrict__ bv = reinterpret_cast<const uint4*>(b);
        const uint4* __restrict__ cv = reinterpret_cast<const uint4*>(c);
        uint4* __restrict__ av = reinterpret_cast<uint4*>(a);
        for (long long i = first; i < groups; i += stride) {
            pack x, y, z;
            x.u = bv[i];
            y.u = cv[i];
#pragma unroll
            for (int j = 0; j < V; ++j) z.e[j] = store(load(x.e[j]) + q * load(y.e[j]));
            av[i] = z.u;
        }
        done = groups * V;
    }
    for (long long i = done + first; i < n; i += stride) a[i] = store(load(b[i]) + q * load(c[i]));
}

extern "C" __global__ void stream_fill_${NAME}(${T}* __restrict__ a, long long n, ${ACC} q) {
    using namespace rl_${NAME};
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const elem value = store(q);
    long long done = 0;
    if (aligned16(a)) {
        const long long groups = n / V;
        uint4* __restrict__ av = reinterpret_cast<uint4*>(a);
        pack y;
#pragma unroll
        for (int j = 0; j < V; ++j) y.e[j] = value;
        for (long long i = first; i < groups; i += stride) av[i] = y.u;
        done = groups * V;
    }
    for (long long i = done + first; i < n; i += stride) a[i] = value;
}

// blockDim.x must be ${DOT_THREADS}; partial[blockIdx.x] receives the block's sum.
extern "C" __global__ void stream_dot_${NAME}(const ${T}* __restrict__ a, const ${T}* __restrict__ b,
                                              ${ACC}* __restrict__ partial, long long n) {
    using namespace rl_${NAME};
    __shared__ ${ACC} tile[${DOT_THREADS}];
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    ${ACC} sum = 0;
    long long done = 0;
    if (aligned16(a) && aligned16(b)) {
        const long long groups = n / V;
        const uint4* __restrict__ av = reinterpret_cast<const uint4*>(a);
        const uint4* __restrict__ bv = reinterpret_cast<const uint4*>(b);
        for (long long i = first; i < groups; i += stride) {
            pack x, y;
            x.u = av[i];
            y.u = bv[i];
#pragma unroll
            for (int j = 0; j < V; ++j) sum += load(x.e[j]) * load(y.e[j]);
        }
        done = groups * V;
    }
    for (long long i = done + first; i < n; i += stride) sum += load(a[i]) * load(b[i]);
    tile[threadIdx.x] = sum;
    for (int offset = blockDim.x / 2; offset > 0; offset /= 2) {
        __syncthreads();
        if (threadIdx.x < offset) tile[threadIdx.x] += tile[threadIdx.x + offset];
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = tile[0];
}

// one block of ${DOT_THREADS} threads: out[0] = sum of partial[0..count)
extern "C" __global__ void stream_dot_final_${NAME}(const ${ACC}* __restrict__ partial, ${ACC}* __restrict__ out,
                                                    int count) {
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
    body = STREAM_TEMPLATE.substitute(NAME=dtype, T=ct.ctype, ACC=ct.acc, DOT_THREADS=DOT_THREADS)
    return helpers(dtype, dtype) + body


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

# 16-bit types: two lanes per thread with packed FMAs (fma.rn.f16x2 / fma.rn.bf16x2 on the raw
# bits, as __hfma2 does), as mixbench does with half2; the last element of an odd n is done by one
# thread with the scalar fma.rn.f16 / fma.rn.bf16.
FMA_PAIR_TEMPLATE = Template(
    """
namespace rl_${NAME} {
__device__ __forceinline__ unsigned int fma2(unsigned int a, unsigned int b, unsigned int c) {
    unsigned int d;
    asm("fma.rn.${PTX}x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ unsigned short fma1(unsigned short a, unsigned short b, unsigned short c) {
    unsigned short d;
    asm("fma.rn.${PTX} %0, %1, %2, %3;" : "=h"(d) : "h"(a), "h"(b), "h"(c));
    return d;
}
__device__ __forceinline__ unsigned short from_float(float x) {
    unsigned short h;
    asm("cvt.rn.${PTX}.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
}

extern "C" __global__ void ${NAME}(const ${T}* __restrict__ x, ${T}* __restrict__ y, long long n, float alpha_in) {
    using namespace rl_${NAME};
    const unsigned short a1 = from_float(alpha_in);
    const ${T2} alpha = ((${T2})a1 << 16) | a1;
    const ${T2}* __restrict__ x2 = reinterpret_cast<const ${T2}*>(x);
    ${T2}* __restrict__ y2 = reinterpret_cast<${T2}*>(y);
    const long long pairs = n / 2;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = first; i < pairs; i += stride) {
        const ${T2} xi = x2[i];
        ${T2} b = xi;
#pragma unroll
        for (int j = 0; j < ${K}; ++j) b = fma2(b, alpha, xi);
        y2[i] = b;
    }
    if ((n & 1) && first == 0) {
        const ${T} xi = x[n - 1];
        ${T} b = xi;
#pragma unroll
        for (int j = 0; j < ${K}; ++j) b = fma1(b, a1, xi);
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
        body = FMA_PAIR_TEMPLATE.substitute(NAME=name, T=ct.ctype, T2=ct.vec2, PTX=ct.ptx, K=int(k))
    return body


# ------------------------------------------------------------------ launch overhead
# The smallest useful kernel: y[i] = x[i] + 1 for i < n (n is tiny).

LAUNCH_TEMPLATE = Template(
    """
extern "C" __global__ void ${NAME}(const ${T}* __restrict__ x, ${T}* __restrict__ y, long long n) {
    using namespace rl_${NAME};
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = store(load(x[i]) + (${ACC})1);
}
"""
)


def launch_kernel_name(dtype: str) -> str:
    return f"tiny_add_one_{dtype}"


def launch_source(dtype: str) -> str:
    ct = CTYPES[dtype]
    name = launch_kernel_name(dtype)
    return helpers(name, dtype) + LAUNCH_TEMPLATE.substitute(NAME=name, T=ct.ctype, ACC=ct.acc)


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
