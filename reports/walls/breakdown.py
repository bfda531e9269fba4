"""Where a block's time goes: its parts against the device's roofs, MFU and the fusion estimate.

For each profiled block measurement (runners.engine.attribution stored its parts) this module derives:

- per part: share of the profiled whole, achieved TFLOP/s and GB/s (its model FLOPs and bytes over
  its measured time), roofline time against the device's roofs (reports.roofs.ceilings: the matrix roof
  of the dtype for matmul, attention and backward parts, the vector roof for the memory-bound
  parts, the cold HBM roof for bytes), efficiency = roofline / measured, and the wall by the
  roofline rule (reports/walls/roofline_rule.py, against the eager launch floor);
- the time no part accounts for (gap + unattributed, drawn as the overhead wall), the sum check
  (|sum(parts) + unattributed + gap - whole| / whole <= runners' PARTS_SUM_TOLERANCE), and the
  profiled whole against the event-timed median (the profiler's own cost);
- MFU = block model FLOPs / median / matrix roof: against the measured matrix ceiling of the dtype
  and against the datasheet peak (each None when the device has no such figure);
- the fusion estimate: per chain of memory-bound parts between matmuls
  (suite.ops.layer_model.fusion_chains), the bytes a fused kernel would not move and the time
  that saves at the measured (else datasheet) HBM roof; the estimated eager/fused speedup beside
  the measured eager/compiled speedup of the same case (the newest usable compiled result).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

import pandas as pd

from rooflab.db import rates
from rooflab.db.layer_query import layer_profiles
from rooflab.reports.data.frames import params_of, with_figure
from rooflab.reports.data.reads import REPORT_COLUMNS, load_device_results
from rooflab.reports.roofs.ceilings import bandwidth_roof, compute_ceilings, compute_roof, launch_floor_ms
from rooflab.reports.roofs.models import DeviceCeilings
from rooflab.reports.walls.diagnosis import latest_per_case
from rooflab.reports.walls.roofline_rule import Roofs, roofline_bound
from rooflab.suite.ops.layer_model import PARTS_SUM_TOLERANCE, forward_parts, fusion_chains
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CeilingKind, TimingMode, Wall

MATRIX_KINDS = ("matmul", "attention", "backward")
PART_COLOURS = {
    "norm1": "#8da0cb", "qkv": "#1b9e77", "attention": "#d95f02", "out_proj": "#66a61e", "residual1": "#e7298a",
    "norm2": "#7570b3", "mlp_up": "#1f78b4", "activation": "#e6ab02", "mlp_down": "#a6761d", "residual2": "#f781bf",
    "backward": "#666666", "unaccounted": "#cccccc",
}
WALL_COLOURS: dict[str | None, str] = {Wall.COMPUTE: "#1b9e77", Wall.BANDWIDTH: "#d95f02", Wall.OVERHEAD: "#999999",
                                       None: "#dddddd"}


@dataclass(frozen=True)
class PartRow:
    name: str
    kind: str
    time_ms: float
    share: float  # of the profiled whole
    flops: int
    bytes: int
    tflops: float
    gbps: float
    roofline_ms: float
    efficiency: float
    wall: str | None
    events: int = 0  # kernels (GPU) or top-level operators (CPU) in the part


@dataclass(frozen=True)
class ChainEstimate:
    parts: tuple[str, ...]
    unfused_bytes: int
    saved_bytes: int
    saved_ms: float


@dataclass(frozen=True)
class Breakdown:
    """One profiled block measurement, read against its device's roofs."""

    case_key: str
    run_id: str
    dtype: str
    params: dict[str, Any]
    clock: str
    median_ms: float
    whole_ms: float
    host_ms: float
    gap_ms: float
    unattributed_ms: float
    overlap_ms: float
    flops: int
    parts: tuple[PartRow, ...]
    mfu_measured: float | None
    mfu_datasheet: float | None
    matrix_roof_tflops: float | None
    datasheet_tflops: float | None
    chains: tuple[ChainEstimate, ...] = field(default=())
    bandwidth_roof_gbps: float | None = None
    compiled_ms: float | None = None

    @property
    def unaccounted_ms(self) -> float:
        return self.gap_ms + self.unattributed_ms

    @property
    def sum_error(self) -> float:
        total = sum(p.time_ms for p in self.parts) + self.unattributed_ms + self.gap_ms
        return abs(total - self.whole_ms) / self.whole_ms if self.whole_ms > 0 else math.nan

    @property
    def sums_ok(self) -> bool:
        return self.sum_error <= PARTS_SUM_TOLERANCE

    @property
    def profiler_overhead(self) -> float:
        """Profiled whole / event-timed median - 1 (the cost of recording, relative)."""
        return self.whole_ms / self.median_ms - 1.0

    @property
    def fusion_saved_ms(self) -> float | None:
        """Time the fused chains would save at the bandwidth roof (None without a bandwidth roof)."""
        if self.bandwidth_roof_gbps is None:
            return None
        return sum(c.saved_ms for c in self.chains)

    @property
    def estimated_speedup(self) -> float | None:
        """median / (median - what fusing the chains saves at the bandwidth roof)."""
        saved = self.fusion_saved_ms
        if saved is None:
            return None
        left = self.median_ms - saved
        return self.median_ms / left if left > 0 else None

    @property
    def compiled_speedup(self) -> float | None:
        return self.median_ms / self.compiled_ms if self.compiled_ms else None

    def by_wall(self) -> dict[str | None, float]:
        """Profiled time per wall, what no part accounts for counted as overhead."""
        out: dict[str | None, float] = {}
        for p in self.parts:
            out[p.wall] = out.get(p.wall, 0.0) + p.time_ms
        out[Wall.OVERHEAD] = out.get(Wall.OVERHEAD, 0.0) + self.unaccounted_ms
        return out

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON: NaN (a figure without its roof) becomes None."""
        return _no_nan(self._fields())

    def _fields(self) -> dict[str, Any]:
        return {
            "case_key": self.case_key, "run_id": self.run_id, "dtype": self.dtype, "params": self.params,
            "clock": self.clock, "median_ms": self.median_ms, "whole_ms": self.whole_ms, "host_ms": self.host_ms,
            "profiler_overhead": self.profiler_overhead, "gap_ms": self.gap_ms,
            "unattributed_ms": self.unattributed_ms, "overlap_ms": self.overlap_ms, "sum_error": self.sum_error,
            "sum_tolerance": PARTS_SUM_TOLERANCE, "sums_ok": self.sums_ok, "flops": self.flops,
            "tflops": rates.tflops(self.flops, self.median_ms),
            "mfu_measured": self.mfu_measured, "mfu_datasheet": self.mfu_datasheet,
            "matrix_roof_tflops": self.matrix_roof_tflops, "datasheet_tflops": self.datasheet_tflops,
            "bandwidth_roof_gbps": self.bandwidth_roof_gbps,
            "parts": [p.__dict__ for p in self.parts],
            "by_wall": {str(k): v for k, v in self.by_wall().items()},
            "chains": [c.__dict__ for c in self.chains], "fusion_saved_ms": self.fusion_saved_ms,
            "estimated_speedup": self.estimated_speedup, "compiled_ms": self.compiled_ms,
            "compiled_speedup": self.compiled_speedup,
        }


def _no_nan(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    return value


def _part_row(part: pd.Series, whole_ms: float, dtype: str, dc: DeviceCeilings, floor: float | None) -> PartRow:
    time_ms, flops, nbytes = float(part["time_ms"]), int(part["flops"]), int(part["bytes"])
    croof = compute_roof(dc, dtype, matrix=part["kind"] in MATRIX_KINDS)
    broof = bandwidth_roof(dc)
    roofs = Roofs(croof.value if croof else None, broof.value if broof else None, floor)
    b = roofline_bound(flops, nbytes, roofs, time_ms)
    return PartRow(
        name=str(part["name"]), kind=str(part["kind"]), time_ms=time_ms,
        share=time_ms / whole_ms if whole_ms > 0 else math.nan, flops=flops, bytes=nbytes,
        tflops=rates.tflops(flops, time_ms) if time_ms > 0 else math.nan,
        gbps=rates.gbps(nbytes, time_ms) if time_ms > 0 else math.nan,
        roofline_ms=b.roofline_ms, efficiency=b.efficiency, wall=b.wall, events=int(part["events"]),
    )


def _chains(params: dict[str, Any], dtype: str, dc: DeviceCeilings) -> tuple[tuple[ChainEstimate, ...], float | None]:
    roof = bandwidth_roof(dc)
    resolved = get_op("transformer_block").resolved_params(params)
    out = []
    for chain in fusion_chains(forward_parts(resolved, dtype), dtype):
        saved_ms = rates.ms_at_gbps(chain.saved_bytes, roof.value) if roof else math.nan
        out.append(ChainEstimate(chain.parts, chain.unfused_bytes, chain.saved_bytes, saved_ms))
    return tuple(out), (roof.value if roof else None)


def _compiled_ms(results: pd.DataFrame, profile: pd.Series) -> float | None:
    """The newest usable compiled result of the same op, dtype, params, cache and timing mode."""
    rows = latest_per_case(results) if not results.empty else results
    if rows.empty:
        return None
    rows = rows[(rows["op"] == profile["op"]) & (rows["backend"] == "compiled") & (rows["dtype"] == profile["dtype"])
                & (rows["cache"] == profile["cache"]) & (rows["timing_mode"] == profile["timing_mode"])]
    want = params_of(profile["params"])
    for _, row in rows.iterrows():
        if params_of(row["params"]) == want:
            return float(row["median_ms"])
    return None


def breakdowns(profiles: pd.DataFrame, parts: pd.DataFrame, results: pd.DataFrame,
               dc: DeviceCeilings) -> list[Breakdown]:
    """The newest profiled measurement of each case of one device (`profiles`, `results`: that
    device's rows; `parts`: any superset of their parts)."""
    if profiles.empty:
        return []
    rows = with_figure(profiles)
    rows = rows.sort_values(["run_order", "measurement_id"]).drop_duplicates("case_key", keep="last")
    floor = launch_floor_ms(dc, TimingMode.LAUNCH)
    out = []
    for _, prof in rows.iterrows():
        dtype = str(prof["dtype"])
        whole = float(prof["whole_ms"])
        mine = parts[parts["measurement_id"] == prof["measurement_id"]].sort_values("position")
        matrix = dc.get(CeilingKind.MATRIX, dtype=dtype)
        sheet = dc.spec.peak_tflops(dtype, matrix=True) if dc.spec is not None else None
        achieved = rates.tflops(float(prof["flops"]), float(prof["median_ms"]))
        params = params_of(prof["params"])
        chains, bw = _chains(params, dtype, dc)
        out.append(Breakdown(
            case_key=str(prof["case_key"]), run_id=str(prof["run_id"]), dtype=dtype, params=params,
            clock=str(prof["clock"]), median_ms=float(prof["median_ms"]), whole_ms=whole,
            host_ms=float(prof["host_ms"]), gap_ms=float(prof["gap_ms"]),
            unattributed_ms=float(prof["unattributed_ms"]), overlap_ms=float(prof["overlap_ms"]),
            flops=int(prof["flops"]),
            parts=tuple(_part_row(p, whole, dtype, dc, floor) for _, p in mine.iterrows()),
            mfu_measured=achieved / matrix.value if matrix else None,
            mfu_datasheet=achieved / sheet.value if sheet else None,
            matrix_roof_tflops=matrix.value if matrix else None,
            datasheet_tflops=sheet.value if sheet else None,
            chains=chains, bandwidth_roof_gbps=bw, compiled_ms=_compiled_ms(results, prof),
        ))
    return out


def label(b: Breakdown) -> str:
    p = b.params
    keys = ("batch", "seq", "hidden", "heads", "norm", "activation", "kernel", "pass")
    return f"{b.dtype} " + " ".join(f"{k}={p[k]}" for k in keys if k in p)


def stacked_bars_svg(items: list[Breakdown], *, width: int = 760) -> str:
    """Two horizontal bars per block, each the profiled whole: split by part, and by wall (an
    inline SVG element for an HTML page: no namespace declaration, which HTML does not need)."""
    bar_h, gap, left = 16, 10, 10
    rows_h = 3 * bar_h + gap
    height = max(1, len(items)) * rows_h + 40
    usable_w = width - 2 * left
    out = [f'<svg width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" role="img">']
    for i, b in enumerate(items):
        y = i * rows_h + 4
        out.append(f'<text x="{left}" y="{y + 10}">{escape(label(b))}: profiled {b.whole_ms:.4g} ms, '
                   f'median {b.median_ms:.4g} ms</text>')
        scale = usable_w / b.whole_ms if b.whole_ms > 0 else 0.0
        segments = [(p.name, p.time_ms, PART_COLOURS.get(p.name, "#bbbbbb")) for p in b.parts]
        segments.append(("unaccounted", b.unaccounted_ms, PART_COLOURS["unaccounted"]))
        walls = [(str(w), ms, WALL_COLOURS.get(w, "#dddddd")) for w, ms in b.by_wall().items()]
        for row, segs in ((1, segments), (2, walls)):
            x = float(left)
            for name, ms, colour in segs:
                w = max(0.0, ms * scale)
                out.append(f'<rect x="{x:.2f}" y="{y + row * bar_h}" width="{w:.2f}" height="{bar_h - 2}" '
                           f'fill="{colour}"><title>{escape(name)}: {ms:.4g} ms</title></rect>')
                if w > 40:
                    out.append(f'<text x="{x + 2:.2f}" y="{y + row * bar_h + 11}" fill="#000">{escape(name)}</text>')
                x += w
    legend_y = height - 14
    x = left
    for wall in (Wall.COMPUTE, Wall.BANDWIDTH, Wall.OVERHEAD):  # a block's parts are kernels: no comms wall
        out.append(f'<rect x="{x}" y="{legend_y - 9}" width="10" height="10" fill="{WALL_COLOURS[wall]}"/>'
                   f'<text x="{x + 14}" y="{legend_y}">{wall}</text>')
        x += 90
    out.append(f'<text x="{x}" y="{legend_y}">upper bar: by part; lower bar: '
               'by wall (unaccounted time as overhead)</text>')
    out.append("</svg>")
    return "".join(out)


def split_profiles(profiles: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The profiles of the device whose results are `rows` (matched by fingerprint and name)."""
    if profiles.empty or rows.empty:
        return profiles.iloc[0:0]
    names = set(rows["device_name"].dropna())
    prints = set(rows["device_fingerprint"].dropna())
    return profiles[profiles["device_name"].isin(names) & profiles["device_fingerprint"].isin(prints)]


def device_breakdowns(url: str, device: str) -> tuple[str, list[Breakdown]]:
    """(device name, breakdowns) of one device in the database at `url`."""
    name, rows = load_device_results(url, device, REPORT_COLUMNS)
    profiles, parts = layer_profiles(url)
    return name, breakdowns(split_profiles(profiles, rows), parts, rows, compute_ceilings(rows, name))
