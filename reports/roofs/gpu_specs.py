"""Datasheet figures of common accelerators, each with its source, and matching from device names.

All tensor (matrix) figures are dense (no structured sparsity). Compute peaks are TFLOP/s (TOPS for
int8), bandwidth is decimal GB/s, L2 is bytes. Source tags:
  LGT   Lightning `throughput.py` `_CUDA_FLOPS` (cites the NVIDIA datasheets)
  MLE   stas00/ml-engineering `compute/accelerator/README.md`
  GKW   glennklockwood.com/garden/processors/* (cite NVIDIA datasheets and whitepapers)
  DSr   third-party reproduction of the NVIDIA datasheet table
  ROCm  ROCm `gpu-arch-info` table
  3p    third-party spec database (lower confidence)
  DS:x  the vendor datasheet named x
Interconnect figures are per GPU and per direction (datasheets print the two directions added:
NVLink 4's "900 GB/s" is 450 GB/s each way), since a collective's bus bandwidth (nccl-tests'
busbw) is held against what one GPU can send: `nvlink_gbps` over NVLink (to an NVSwitch, or a
bridge between two cards), `pcie_gbps` over the PCIe link to the host (an x16 link's signalling
rate; a GPU's collectives over PCIe reach less: NCCL's own topology model counts about 24 GB/s
for Gen4 x16). AMD's Infinity Fabric is given as `nvlink_gbps` (the GPU-to-GPU links).
These figures are drawn beside measured ceilings for contrast; they never replace a measurement.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

MiB = 1024 * 1024


@dataclass(frozen=True)
class Figure:
    """One datasheet number and where it comes from."""

    value: float
    source: str


@dataclass(frozen=True)
class GpuSpec:
    """Dense datasheet peaks of one accelerator model."""

    key: str  # short name, e.g. "H100 SXM"
    vendor: str
    memory_gbps: Figure
    l2_bytes: Figure | None
    sm_count: Figure | None  # SMs (NVIDIA) or CUs (AMD)
    vector_tflops: Mapping[str, Figure] = field(default_factory=dict)  # CUDA-core / vector ALU peaks
    matrix_tflops: Mapping[str, Figure] = field(default_factory=dict)  # tensor-core / matrix peaks
    name_patterns: tuple[str, ...] = ()  # regexes (case-insensitive) matched against a detected name
    nvlink_gbps: Figure | None = None  # GPU-to-GPU links (NVLink, Infinity Fabric), per direction
    pcie_gbps: Figure | None = None  # the host link, per direction

    @property
    def interconnect_gbps(self) -> Figure | None:
        """The link a collective between the GPUs of a node uses: NVLink where the part has it, else PCIe."""
        return self.nvlink_gbps or self.pcie_gbps

    def figures(self) -> list[dict]:
        """Every figure of the entry as {quantity, value, unit, source} rows."""
        rows = [{"quantity": "memory bandwidth", "value": self.memory_gbps.value, "unit": "GB/s",
                 "source": self.memory_gbps.source}]
        if self.l2_bytes is not None:
            rows.append({"quantity": "L2", "value": self.l2_bytes.value, "unit": "bytes",
                         "source": self.l2_bytes.source})
        if self.sm_count is not None:
            rows.append({"quantity": "SMs" if self.vendor == "NVIDIA" else "CUs", "value": self.sm_count.value,
                         "unit": "", "source": self.sm_count.source})
        for label, link in (("NVLink per direction", self.nvlink_gbps), ("PCIe per direction", self.pcie_gbps)):
            if link is not None:
                rows.append({"quantity": label, "value": link.value, "unit": "GB/s", "source": link.source})
        for label, table in (("vector", self.vector_tflops), ("matrix", self.matrix_tflops)):
            for dtype, fig in table.items():
                rows.append({"quantity": f"{label} {dtype}", "value": fig.value,
                             "unit": "TOPS" if dtype == "int8" else "TFLOP/s", "source": fig.source})
        return rows

    def peak_tflops(self, dtype: str, *, matrix: bool) -> Figure | None:
        """The peak for `dtype` on tensor cores (`matrix`) or on the vector units, if the datasheet has one."""
        table = self.matrix_tflops if matrix else self.vector_tflops
        return table.get(normalise_dtype(dtype))


def normalise_dtype(dtype: str) -> str:
    """Map float8 variants onto one key; everything else as torch spells it."""
    if dtype.startswith("float8"):
        return "float8"
    return dtype


def _f(value: float, source: str) -> Figure:
    return Figure(float(value), source)


def _link(both_ways: float, source: str) -> Figure:
    """A link's per-direction figure from the datasheet's two directions added."""
    return Figure(both_ways / 2, f"{source}: {both_ways:g} GB/s both directions, half each way")


def _half(value: float, source: str) -> dict[str, Figure]:
    fig = _f(value, source)
    return {"float16": fig, "bfloat16": fig}


_A100_DS = "DS: NVIDIA A100 datasheet (via LGT/GKW)"
_H100_DS = "DS: NVIDIA H100 datasheet"

SPECS: tuple[GpuSpec, ...] = (
    GpuSpec(
        key="V100 SXM2",
        vendor="NVIDIA",
        memory_gbps=_f(900, "Volta spec table (techrival/elchapuzas)"),
        l2_bytes=_f(6 * MiB, "Volta spec table"),
        sm_count=_f(80, "Volta spec table"),
        vector_tflops={"float64": _f(7.8, "LGT"), "float32": _f(15.7, "LGT")},
        matrix_tflops={"float16": _f(125, "LGT (FP16 tensor)")},
        name_patterns=(r"v100.*sxm", r"v100$"),
        nvlink_gbps=_link(300, "DS: NVIDIA V100 datasheet (NVLink 2)"),
        pcie_gbps=_link(32, "DS: NVIDIA V100 datasheet (PCIe Gen3 x16)"),
    ),
    GpuSpec(
        key="A100 SXM 80GB",
        vendor="NVIDIA",
        memory_gbps=_f(2039, "GKW"),
        l2_bytes=_f(40 * MiB, "MLE"),
        sm_count=_f(108, "GKW, MLE"),
        vector_tflops={"float64": _f(9.7, "GKW"), "float32": _f(19.5, "MLE, GKW")},
        matrix_tflops={
            "float64": _f(19.5, "GKW"),
            "tf32": _f(156, "MLE"),
            **_half(312, "MLE"),
            "int8": _f(624, _A100_DS + ", TOPS"),
        },
        name_patterns=(r"a100.*sxm.*80", r"a100.*80.*sxm", r"a100 sxm$", r"a100$"),
        nvlink_gbps=_link(600, _A100_DS + " (NVLink 3)"),
        pcie_gbps=_link(64, _A100_DS + " (PCIe Gen4 x16)"),
    ),
    GpuSpec(
        key="A100 SXM 40GB",
        vendor="NVIDIA",
        memory_gbps=_f(1555, "mixbench issue #18 spec figure; " + _A100_DS),
        l2_bytes=_f(40 * MiB, "MLE"),
        sm_count=_f(108, "GKW, MLE"),
        vector_tflops={"float64": _f(9.7, "GKW"), "float32": _f(19.5, "MLE, GKW")},
        matrix_tflops={
            "float64": _f(19.5, "GKW"),
            "tf32": _f(156, "MLE"),
            **_half(312, "MLE"),
            "int8": _f(624, _A100_DS + ", TOPS"),
        },
        name_patterns=(r"a100.*sxm",),
        nvlink_gbps=_link(600, _A100_DS + " (NVLink 3)"),
        pcie_gbps=_link(64, _A100_DS + " (PCIe Gen4 x16)"),
    ),
    GpuSpec(
        key="A100 PCIe 80GB",
        vendor="NVIDIA",
        memory_gbps=_f(1935, _A100_DS + " (80GB PCIe)"),
        l2_bytes=_f(40 * MiB, "MLE"),
        sm_count=_f(108, "GKW, MLE"),
        vector_tflops={"float64": _f(9.7, _A100_DS), "float32": _f(19.5, _A100_DS)},
        matrix_tflops={
            "float64": _f(19.5, _A100_DS),
            "tf32": _f(156, _A100_DS),
            **_half(312, "MLE (A100 PCIe theory 312)"),
            "int8": _f(624, _A100_DS + ", TOPS"),
        },
        name_patterns=(r"a100.*80.*pcie", r"a100.*pcie.*80", r"a100 pcie$"),
        pcie_gbps=_link(64, _A100_DS + " (PCIe Gen4 x16; an optional NVLink bridge joins two cards at 600)"),
    ),
    GpuSpec(
        key="A100 PCIe 40GB",
        vendor="NVIDIA",
        memory_gbps=_f(1555, _A100_DS + " (40GB PCIe)"),
        l2_bytes=_f(40 * MiB, "MLE"),
        sm_count=_f(108, "GKW, MLE"),
        vector_tflops={"float64": _f(9.7, _A100_DS), "float32": _f(19.5, _A100_DS)},
        matrix_tflops={
            "float64": _f(19.5, _A100_DS),
            "tf32": _f(156, _A100_DS),
            **_half(312, "MLE (A100 PCIe theory 312)"),
            "int8": _f(624, _A100_DS + ", TOPS"),
        },
        name_patterns=(r"a100.*pcie",),
        pcie_gbps=_link(64, _A100_DS + " (PCIe Gen4 x16; an optional NVLink bridge joins two cards at 600)"),
    ),
    GpuSpec(
        key="H100 SXM",
        vendor="NVIDIA",
        memory_gbps=_f(3350, "MLE, GKW"),
        l2_bytes=_f(50 * MiB, "MLE"),
        sm_count=_f(132, "GKW, MLE"),
        vector_tflops={"float64": _f(33.5, "GKW"), "float32": _f(66.9, "GKW")},
        matrix_tflops={
            "float64": _f(66.9, "GKW"),
            "tf32": _f(494.7, "LGT"),
            **_half(989.4, "GKW"),
            "float8": _f(1978.9, "GKW"),
            "int8": _f(1978.9, "LGT, TOPS"),
        },
        name_patterns=(r"h100.*sxm", r"h100 80gb hbm3", r"h100$", r"h100 hbm3"),
        nvlink_gbps=_link(900, _H100_DS + " (NVLink 4, SXM)"),
        pcie_gbps=_link(128, _H100_DS + " (PCIe Gen5 x16)"),
    ),
    GpuSpec(
        key="H100 PCIe",
        vendor="NVIDIA",
        memory_gbps=_f(2000, "MLE (HBM2e)"),
        l2_bytes=_f(50 * MiB, _H100_DS + " (unverified)"),
        sm_count=_f(114, _H100_DS + " (unverified)"),
        vector_tflops={"float64": _f(25.6, "LGT"), "float32": _f(51.2, "LGT")},
        matrix_tflops={
            "float64": _f(51, "LGT (older table)"),
            "tf32": _f(378, "MLE, LGT"),
            **_half(756, "MLE, LGT"),
            "float8": _f(1513, "MLE"),
            "int8": _f(1513, "LGT, TOPS"),
        },
        name_patterns=(r"h100.*pcie",),
        pcie_gbps=_link(128, _H100_DS + " (PCIe Gen5 x16; an optional NVLink bridge joins two cards at 600)"),
    ),
    GpuSpec(
        key="H200",
        vendor="NVIDIA",
        memory_gbps=_f(4800, "MLE"),
        l2_bytes=_f(50 * MiB, "MLE"),
        sm_count=_f(132, "MLE"),
        vector_tflops={"float64": _f(34, "lzwjava page"), "float32": _f(67, "MLE (same as H100 SXM)")},
        matrix_tflops={
            "float64": _f(67, "lzwjava page"),
            "tf32": _f(494.5, "MLE"),
            **_half(989, "MLE"),
            "float8": _f(1979, "MLE"),
            "int8": _f(1979, "MLE note: same compute as H100 SXM, TOPS"),
        },
        name_patterns=(r"h200",),
        nvlink_gbps=_link(900, "DS: NVIDIA H200 datasheet (NVLink 4, SXM)"),
        pcie_gbps=_link(128, "DS: NVIDIA H200 datasheet (PCIe Gen5 x16)"),
    ),
    GpuSpec(
        key="B200",
        vendor="NVIDIA",
        memory_gbps=_f(8000, "MLE (HGX table [DSr] says 7.7 TB/s)"),
        l2_bytes=_f(126 * MiB, "MLE (GB200 example; unverified for B200 SXM)"),
        sm_count=_f(148, "3p (unverified)"),
        vector_tflops={"float64": _f(40, "GKW (HGX @1000 W; DSr says 37)"),
                       "float32": _f(80, "MLE, GKW (DSr says 75)")},
        matrix_tflops={
            "float64": _f(40, "GKW (DSr says 37)"),
            "tf32": _f(1100, "GKW (MLE says 1125)"),
            **_half(2250, "MLE, GKW, DSr"),
            "float8": _f(4500, "MLE, GKW, DSr"),
            "int8": _f(4500, "DSr (9 POPS sparse / 2), TOPS"),
        },
        name_patterns=(r"(?<!g)b200",),
        nvlink_gbps=_link(1800, "DS: NVIDIA HGX B200 datasheet (NVLink 5)"),
    ),
    GpuSpec(
        key="L40S",
        vendor="NVIDIA",
        memory_gbps=_f(864, "MLE, DSr"),
        l2_bytes=_f(48 * MiB, "3p (unverified)"),
        sm_count=_f(142, "derived: 568 tensor cores / 4"),
        vector_tflops={"float32": _f(91.6, "MLE, DSr")},
        matrix_tflops={
            "tf32": _f(183, "MLE, DSr"),
            **_half(362, "MLE, DSr"),
            "float8": _f(733, "MLE, DSr"),
            "int8": _f(733, "DSr, TOPS"),
        },
        name_patterns=(r"l40s",),
        pcie_gbps=_link(64, "DS: NVIDIA L40S datasheet (PCIe Gen4 x16; no NVLink)"),
    ),
    GpuSpec(
        key="L4",
        vendor="NVIDIA",
        memory_gbps=_f(300, "3p"),
        l2_bytes=_f(48 * MiB, "3p (unverified)"),
        sm_count=_f(58, "3p: 7424 cores / 128"),
        vector_tflops={"float32": _f(30.3, "LGT")},
        matrix_tflops={
            "tf32": _f(60, "LGT"),
            **_half(121, "LGT"),
            "float8": _f(242.5, "NVIDIA L4 datasheet 485 with sparsity / 2 (via grokipedia)"),
            "int8": _f(242.5, "NVIDIA L4 datasheet 485 TOPS with sparsity / 2"),
        },
        name_patterns=(r"\bl4\b",),
        pcie_gbps=_link(64, "DS: NVIDIA L4 datasheet (PCIe Gen4 x16; no NVLink)"),
    ),
    GpuSpec(
        key="A10",
        vendor="NVIDIA",
        memory_gbps=_f(600, "3p (unverified)"),
        l2_bytes=_f(6 * MiB, "3p"),
        sm_count=_f(72, "3p"),
        vector_tflops={"float32": _f(31.2, "LGT")},
        matrix_tflops={"tf32": _f(62.5, "LGT"), **_half(125, "LGT"), "int8": _f(250, "LGT, TOPS")},
        name_patterns=(r"\ba10g?\b",),
        pcie_gbps=_link(64, "DS: NVIDIA A10 datasheet (PCIe Gen4 x16)"),
    ),
    GpuSpec(
        key="MI300X",
        vendor="AMD",
        memory_gbps=_f(5300, "MLE"),
        l2_bytes=_f(32 * MiB, "ROCm (4 MB per XCD; 256 MB Infinity Cache behind it)"),
        sm_count=_f(304, "ROCm (CUs)"),
        vector_tflops={"float64": _f(81.7, "runpod GpuInfo.js"), "float32": _f(163.4, "MLE")},
        matrix_tflops={
            "float64": _f(163.4, "unverified"),
            "tf32": _f(653.7, "MLE"),
            **_half(1307.4, "MLE (published as 1300)"),
            "float8": _f(2614.9, "MLE"),
            "int8": _f(2614.9, "AMD MI300X datasheet, TOPS"),
        },
        name_patterns=(r"mi300x",),
        nvlink_gbps=_link(896, "DS: AMD Instinct MI300X datasheet (Infinity Fabric, 7 links)"),
        pcie_gbps=_link(128, "DS: AMD Instinct MI300X datasheet (PCIe Gen5 x16)"),
    ),
)

SPECS_BY_KEY: dict[str, GpuSpec] = {spec.key: spec for spec in SPECS}


def match_device(name: str | None) -> GpuSpec | None:
    """The datasheet entry for a detected device name (e.g. "NVIDIA H100 80GB HBM3"), or None.

    Also accepts a table key ("H100 SXM") and bare model names ("A100", "H100", "V100": the SXM
    part, 80 GB for the A100). Patterns are tried in table order; more specific entries (A100 80GB
    SXM) come before the general ones (A100 SXM).
    """
    if not name:
        return None
    text = " ".join(name.strip().lower().replace("_", " ").split())
    for spec in SPECS:
        if text == spec.key.lower():
            return spec
    # "NVIDIA A100-SXM4-80GB" -> "nvidia a100 sxm4 80gb"
    text = text.replace("-", " ")
    for spec in SPECS:
        if any(re.search(pattern, text) for pattern in spec.name_patterns):
            return spec
    return None
