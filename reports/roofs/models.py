"""The roofs' models: a measured ceiling (`Ceiling`), a device's ceilings with its datasheet entry
(`DeviceCeilings`) and the value a case is held against (`Roof`), with what builds a Ceiling from a
result row (`best_of`, `ceiling_of`, `method_of`).

The rules that derive each ceiling live in reports.roofs.ceilings (and for their own roofs
reports.roofs.elementary and reports.roofs.interconnect); they all build and read the records of
this module, which imports none of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import pandas as pd

from rooflab.reports.roofs.gpu_specs import Figure, GpuSpec
from rooflab.vocab import HBM_CEILINGS, TENSOR_CORE_DTYPES, CacheMode, CeilingKind

HALF_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
UNITS = {CeilingKind.HBM_RW: "GB/s", CeilingKind.HBM_RO: "GB/s", CeilingKind.HBM_WO: "GB/s", CeilingKind.L2: "GB/s",
         CeilingKind.VECTOR: "TFLOP/s",
         CeilingKind.MATRIX: "TFLOP/s", CeilingKind.LAUNCH: "ms", CeilingKind.ELEMENTARY: "Geval/s",
         CeilingKind.INTERCONNECT: "GB/s", CeilingKind.COMM_LATENCY: "ms"}
COLLECTIVE_FAMILY = "collective"  # suite.ops.collective.FAMILY: their gbps is a bus bandwidth, not DRAM traffic


@dataclass(frozen=True)
class Ceiling:
    """One measured ceiling and where it came from."""

    kind: CeilingKind
    value: float  # GB/s, TFLOP/s or ms (see `unit`)
    case_key: str
    run_id: str
    dtype: str | None = None  # compute ceilings
    timing_mode: str | None = None  # launch floor
    datasheet: float | None = None
    datasheet_source: str | None = None
    probe_value: float | None = None  # the probe's figure when a trustworthy op beat it (see the module doc)
    probe_case_key: str | None = None
    function: str | None = None  # elementary ceilings: cos, exp or erf
    collective: str | None = None  # interconnect and comm_latency: the collective ...
    ranks: int | None = None  # ... and its world size
    cache: str | None = None  # how the result that set it was measured: cold | hot ...
    flush_method: str | None = None  # ... write_sweep | read_sweep | none ...
    pace: str | None = None  # ... back_to_back | idle | barrier (None: not recorded) ...
    collective_mode: str | None = None  # ... and a collective's mode: stream | isolated

    @property
    def method(self) -> str:
        """How the result that set this ceiling was measured, e.g. `cold write_sweep, back_to_back`,
        `hot, back_to_back, stream` (a collective)."""
        flush = f" {self.flush_method}" if self.cache == CacheMode.COLD and self.flush_method else ""
        pace = f", {self.pace}" if self.pace else ""
        mode = f", {self.collective_mode}" if self.collective_mode else ""
        return f"{self.cache or ''}{flush}{pace}{mode}"

    @property
    def raised(self) -> bool:
        return self.probe_value is not None

    @property
    def unit(self) -> str:
        return UNITS[self.kind]

    @property
    def ratio(self) -> float | None:
        """Measured / datasheet (None without a datasheet figure)."""
        return self.value / self.datasheet if self.datasheet else None

    @property
    def group(self) -> str | None:
        """`all_reduce x8` for a collective's ceilings."""
        return f"{self.collective} x{self.ranks}" if self.collective else None

    @property
    def label(self) -> str:
        extra = " ".join(x for x in (self.function, self.dtype or self.timing_mode or self.group) if x)
        return f"{self.kind} {extra}" if extra else self.kind

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "dtype": self.dtype,
            "timing_mode": self.timing_mode,
            "value": self.value,
            "unit": self.unit,
            "case_key": self.case_key,
            "run_id": self.run_id,
            "datasheet": self.datasheet,
            "datasheet_source": self.datasheet_source,
            "ratio": self.ratio,
            "probe_value": self.probe_value,
            "probe_case_key": self.probe_case_key,
            "function": self.function,
            "collective": self.collective,
            "ranks": self.ranks,
            "group": self.group,
            "cache": self.cache,
            "flush_method": self.flush_method,
            "pace": self.pace,
            "collective_mode": self.collective_mode,
            "method": self.method,
        }


@dataclass(frozen=True)
class DeviceCeilings:
    """All measured ceilings of one device, plus its datasheet entry (None when unknown)."""

    device_name: str
    spec: GpuSpec | None
    l2_bytes: int  # from the results (the device's own report), else the datasheet, else 0
    ceilings: tuple[Ceiling, ...]

    def get(self, kind: str, *, dtype: str | None = None, timing_mode: str | None = None,
            collective: str | None = None, ranks: int | None = None) -> Ceiling | None:
        for c in self.ceilings:
            if (c.kind == kind and (dtype is None or c.dtype == dtype)
                    and (timing_mode is None or c.timing_mode == timing_mode)
                    and (collective is None or c.collective == collective) and (ranks is None or c.ranks == ranks)):
                return c
        return None

    def as_dict(self) -> dict:
        return {
            "device_name": self.device_name,
            "datasheet": self.spec.key if self.spec else None,
            "datasheet_figures": self.spec.figures() if self.spec else [],
            "l2_bytes": self.l2_bytes,
            "ceilings": [c.as_dict() for c in self.ceilings],
        }


def best_of(rows: pd.DataFrame, column: str) -> pd.Series | None:
    values = pd.to_numeric(rows[column], errors="coerce") if not rows.empty else None
    if values is None or values.dropna().empty:
        return None
    return rows.loc[values.idxmax()]


def _datasheet(spec: GpuSpec | None, kind: str, dtype: str | None) -> Figure | None:
    if spec is None:
        return None
    if kind in HBM_CEILINGS:
        return spec.memory_gbps
    if kind == CeilingKind.VECTOR and dtype:
        return spec.peak_tflops(dtype, matrix=False)
    if kind == CeilingKind.MATRIX and dtype:
        return spec.peak_tflops(dtype, matrix=True) or (
            spec.peak_tflops(dtype, matrix=False) if dtype not in TENSOR_CORE_DTYPES else None
        )
    if kind == CeilingKind.INTERCONNECT:
        return spec.interconnect_gbps
    return None


def ceiling_of(row: pd.Series, kind: CeilingKind, value: float, spec: GpuSpec | None, *, dtype: str | None = None,
             timing_mode: str | None = None) -> Ceiling:
    fig = _datasheet(spec, kind, dtype)
    return Ceiling(
        kind=kind,
        value=float(value),
        case_key=str(row["case_key"]),
        run_id=str(row["run_id"]),
        datasheet=fig.value if fig else None,
        datasheet_source=fig.source if fig else None,
        dtype=dtype,
        timing_mode=timing_mode,
        **method_of(row),
    )


class Method(TypedDict):
    """How a result was measured, as a Ceiling keeps it."""

    cache: str | None
    flush_method: str | None
    pace: str | None
    collective_mode: str | None


def method_of(row: pd.Series) -> Method:
    """The cache mode, flush method, pace and collective mode of a result row (None where the frame
    lacks them)."""

    def text(name: str) -> str | None:
        value = row.get(name)
        return str(value) if isinstance(value, str) and value else None

    return Method(cache=text("cache"), flush_method=text("flush_method"), pace=text("pace"),
                  collective_mode=text("collective_mode"))


@dataclass(frozen=True)
class Roof:
    """A value used as a roof, and whether it was measured or taken from the datasheet."""

    value: float
    origin: str  # "measured" or "datasheet"
    source: str  # case_key of the measurement, or the datasheet source
    label: str = ""  # which roof: the measured ceiling's label ("vector float32", "hbm_rw"), or the datasheet's
