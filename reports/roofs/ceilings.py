"""Measured ceilings of one device, derived from the probe results by these rules
(docs/design.md, "Ceilings from probes").

- HBM read-write: best gbps of cold stream_copy/scale/add/triad whose bytes >= 4x L2
- HBM read-only:  best gbps of cold stream_dot whose bytes >= 4x L2
- HBM write-only: best gbps of cold stream_fill whose bytes >= 4x L2
- L2:             best gbps of hot stream_* whose bytes <= L2
- vector compute: best tflops of fma_intensity, per dtype
- matrix compute: best tflops of the gemm family, per dtype
- elementary:     best rate of the `elementary` probe (cos, exp, erf evaluations per second), per
                  function and dtype (reports.roofs.elementary)
- launch floor:   median of the `launch` op's medians, per timing mode: what a user pays per launch
                  (host time per launch of back-to-back launches from Python; per launch of a graph
                  replay in graph mode). Version 1 of the op timed a kernel's duration instead, so
                  only results of version LAUNCH_FLOOR_MIN_VERSION and later count
- interconnect:   best gbps (nccl-tests' bus bandwidth) of each collective (family collective) and
                  world size: its large messages; held against the datasheet NVLink (else PCIe) figure
                  per direction
- comm latency:   the fastest median of each collective and world size: its smallest messages, the
                  latency floor of the group
                  (both from one collective mode: `stream`, nccl-tests' method, where the results
                  hold any, else `isolated`; reports.roofs.interconnect.collective_ceilings)
Only trustworthy results count: ok, unthrottled and of good quality (reports.data.frames.trustworthy;
noisy and contended results never set a ceiling). A measured roof is the best trustworthy
evidence: when a trustworthy op's own figure beats the probe's ceiling it is held against (its
GB/s, from the minimum byte count, above the bandwidth ceiling, where it is the kind of case that
may set that ceiling: cold and at least 4x L2 for HBM, hot and within the L2 for L2; its TFLOP/s
above the compute ceiling), the ceiling becomes that op's figure and keeps the probe's figure as `probe_value`.
Datasheet roofs are never raised. The L2 size is the one the device reported (l2_bytes), else the
datasheet's; when neither is known every cold stream counts for HBM and no L2 ceiling is derived.
The bandwidth roof a case is held against (`bandwidth_roof`) follows where its bytes go. A case
whose working set (its bytes) fits in the L2 (the LLC of a CPU) is held against the L2 ceiling,
whatever its cache mode, and never against HBM: its writes, and a hot case's reads, stay in the
cache (a cold fill smaller than the L2 runs above any HBM roof); without an L2 ceiling it has no
bandwidth roof. Any other case is held against HBM by its own mix of reads and writes where its
split is known: its bytes over the time the read roof allows for its reads plus the time the write
roof allows for its writes (hbm_ro for reads, hbm_wo for writes; hbm_rw for a side whose own roof
was not measured); a case that only reads, or only writes, is held against that side's roof alone.
Without the split (a result stored before it was recorded), the op says whether it only reads
(hbm_ro, else hbm_rw). A case held against a mix raises no ceiling; one held against a single
ceiling raises it as above.
Each ceiling keeps the case and run it came from, how that result was measured (its cache mode,
flush method and pace: a cold and a hot figure, or a back-to-back and an idle-paced one, answer
different questions) and, when the device is in the datasheet table, its ratio to the datasheet
figure.

The rule of each of the nine ceilings above lives here (the elementary and interconnect ones in
their own modules, which this one calls), beside the roofs the diagnosis, the comparison and the
predictions read from them, so that "where does a roof come from" has one answer; the records they
build and read (Ceiling, DeviceCeilings, Roof) are reports.roofs.models'.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from rooflab.reports.data.frames import first_value, trustworthy
from rooflab.reports.data.op_facts import reads_only
from rooflab.reports.roofs.elementary import elementary_ceilings
from rooflab.reports.roofs.gpu_specs import GpuSpec, match_device
from rooflab.reports.roofs.interconnect import collective_ceilings
from rooflab.reports.roofs.models import (
    COLLECTIVE_FAMILY,
    HALF_DTYPES,
    Ceiling,
    DeviceCeilings,
    Roof,
    best_of,
    ceiling_of,
    method_of,
)
from rooflab.suite.dtypes import storage_dtype
from rooflab.vocab import HBM_CEILINGS, MATRIX_FAMILIES, CacheMode, CeilingKind

STREAM_RW_OPS = ("stream_copy", "stream_scale", "stream_add", "stream_triad")
STREAM_RO_OPS = ("stream_dot",)
STREAM_WO_OPS = ("stream_fill",)
STREAM_OPS = STREAM_RW_OPS + STREAM_RO_OPS + STREAM_WO_OPS
HBM_MIN_L2_MULTIPLE = 4
# what sets a ceiling: the probes and the GEMM family (see the module doc)
ROOF_OPS = STREAM_OPS + ("fma_intensity", "launch", "elementary")
ROOF_FAMILIES = ("gemm",)
LAUNCH_FLOOR_MIN_VERSION = 2  # the `launch` op version whose samples are host time per launch


def device_l2_bytes(df: pd.DataFrame, spec: GpuSpec | None) -> int:
    """L2 size as the device reported it, else the datasheet's, else 0 (unknown)."""
    reported = None
    if "l2_bytes" in df.columns and not df.empty:
        reported = first_value(df[pd.to_numeric(df["l2_bytes"], errors="coerce") > 0], "l2_bytes")
    if reported:
        return int(reported)
    if spec is not None and spec.l2_bytes is not None:
        return int(spec.l2_bytes.value)
    return 0


def compute_ceilings(df: pd.DataFrame, device_name: str) -> DeviceCeilings:
    """Ceilings of one device from its results (`df` holds that device's rows only)."""
    spec = match_device(device_name)
    l2 = device_l2_bytes(df, spec)
    rows = trustworthy(df)
    out: list[Ceiling] = []
    if rows.empty:
        return DeviceCeilings(device_name, spec, l2, ())
    nbytes = pd.to_numeric(rows["bytes"], errors="coerce").fillna(0)
    cold = rows["cache"] == CacheMode.COLD
    hot = rows["cache"] == CacheMode.HOT
    big = nbytes >= HBM_MIN_L2_MULTIPLE * l2
    for kind, ops, mask in (
        (CeilingKind.HBM_RW, STREAM_RW_OPS, cold & big),
        (CeilingKind.HBM_RO, STREAM_RO_OPS, cold & big),
        (CeilingKind.HBM_WO, STREAM_WO_OPS, cold & big),
        (CeilingKind.L2, STREAM_OPS, hot & (nbytes <= l2) if l2 else hot & False),
    ):
        best = best_of(rows[mask & rows["op"].isin(ops)], "gbps")
        if best is not None:
            out.append(ceiling_of(best, kind, best["gbps"], spec))
    compute_sets = ((CeilingKind.VECTOR, rows["op"] == "fma_intensity"), (CeilingKind.MATRIX, rows["family"] == "gemm"))
    for kind, mask in compute_sets:
        subset = rows[mask]
        for dtype in sorted(subset["dtype"].dropna().unique()):
            best = best_of(subset[subset["dtype"] == dtype], "tflops")
            if best is not None and best["tflops"] > 0:
                out.append(ceiling_of(best, kind, best["tflops"], spec, dtype=str(dtype)))
    out.extend(collective_ceilings(rows, spec))
    rows = rows[rows["family"] != COLLECTIVE_FAMILY]
    launch = rows[rows["op"] == "launch"]
    if "op_version" in launch.columns:
        launch = launch[pd.to_numeric(launch["op_version"], errors="coerce").fillna(1) >= LAUNCH_FLOOR_MIN_VERSION]
    for mode in sorted(launch["timing_mode"].dropna().unique()) if not launch.empty else ():
        sub = launch[launch["timing_mode"] == mode]
        medians = pd.to_numeric(sub["median_ms"], errors="coerce")
        floor = float(medians.median())
        nearest = sub.loc[(medians - floor).abs().idxmin()]
        out.append(ceiling_of(nearest, CeilingKind.LAUNCH, floor, spec, timing_mode=str(mode)))
    out.extend(elementary_ceilings(rows))
    return raise_by_evidence(DeviceCeilings(device_name, spec, l2, tuple(out)), rows)


def _qualifies(dc: DeviceCeilings, kind: str, row: pd.Series) -> bool:
    """Whether `row` is the kind of result that may set a `kind` ceiling: an HBM figure only from a
    cold case of at least 4x L2, an L2 figure only from a hot case that fits in the L2 (as for the
    probes); a compute figure from any case."""
    nbytes = float(row["bytes"] or 0)
    if kind in HBM_CEILINGS:
        return row["cache"] == CacheMode.COLD and nbytes >= HBM_MIN_L2_MULTIPLE * dc.l2_bytes
    if kind == CeilingKind.L2:
        return row["cache"] == CacheMode.HOT and bool(dc.l2_bytes) and nbytes <= dc.l2_bytes
    return True


def raise_by_evidence(dc: DeviceCeilings, rows: pd.DataFrame) -> DeviceCeilings:
    """`dc` with every measured ceiling that a trustworthy row of `rows` beats replaced by that
    row's figure (the best such row per ceiling); see the module doc."""
    bw = [c.value for c in dc.ceilings if c.kind in (*HBM_CEILINGS, CeilingKind.L2)]
    fl = [c.value for c in dc.ceilings if c.kind in (CeilingKind.VECTOR, CeilingKind.MATRIX)]
    if rows.empty or not (bw or fl):
        return dc
    rows = rows[rows["family"] != COLLECTIVE_FAMILY]  # a bus bandwidth is not DRAM traffic
    if rows.empty:
        return dc
    gbps = pd.to_numeric(rows["gbps"], errors="coerce")  # the rates as stored (db/measurement_columns.py)
    tflops = pd.to_numeric(rows["tflops"], errors="coerce")
    beyond = ((gbps > min(bw)) if bw else False) | ((tflops > min(fl)) if fl else False)
    candidates = rows[beyond & (rows["op"] != "launch")]
    best: dict[int, tuple[float, pd.Series]] = {}
    index = {id(c): i for i, c in enumerate(dc.ceilings)}
    for (_, r), g, t in zip(candidates.iterrows(), gbps[candidates.index], tflops[candidates.index], strict=True):
        held: list[tuple[Ceiling | Roof | None, float]] = [(_bandwidth_source(dc, Traffic.of(r)), g)]
        matrix = uses_matrix_units(str(r["family"]), str(r["dtype"]))
        held.append((_compute_choice(dc, str(r["dtype"]), matrix=matrix), t))
        for ceiling, figure in held:
            if isinstance(ceiling, Ceiling) and figure > ceiling.value and _qualifies(dc, ceiling.kind, r):
                i = index[id(ceiling)]
                if i not in best or figure > best[i][0]:
                    best[i] = (float(figure), r)
    if not best:
        return dc
    ceilings = list(dc.ceilings)
    for i, (figure, r) in best.items():
        c = ceilings[i]
        ceilings[i] = replace(c, value=figure, case_key=str(r["case_key"]), run_id=str(r["run_id"]),
                              probe_value=c.value, probe_case_key=c.case_key, **method_of(r))
    return DeviceCeilings(dc.device_name, dc.spec, dc.l2_bytes, tuple(ceilings))


# --- the roofs a case is held against (measured first, else datasheet) ---


def uses_matrix_units(family: str, dtype: str) -> bool:
    """Whether a case of `family` runs on matrix units: true for GEMM and attention
    (MATRIX_FAMILIES), whatever the dtype; `dtype` is not consulted. Such a case is held against
    the matrix roof of its dtype, and `compute_roof(..., matrix=True)` falls back to the vector
    roof when the dtype has no matrix roof (e.g. float32 without TF32)."""
    return family in MATRIX_FAMILIES


def compute_roof(dc: DeviceCeilings, dtype: str, *, matrix: bool) -> Roof | None:
    """Compute roof in TFLOP/s for `dtype`, matrix or vector units; measured first, else datasheet."""
    choice = _compute_choice(dc, dtype, matrix=matrix)
    return Roof(choice.value, "measured", choice.case_key, choice.label) if isinstance(choice, Ceiling) else choice


def _compute_choice(dc: DeviceCeilings, dtype: str, *, matrix: bool) -> Ceiling | Roof | None:
    """The measured ceiling a compute roof is, or the datasheet roof when that comes first."""
    vector_dtype = storage_dtype(dtype)
    order = ([(CeilingKind.MATRIX, dtype), (CeilingKind.VECTOR, vector_dtype)] if matrix
             else [(CeilingKind.VECTOR, vector_dtype)])
    if vector_dtype in HALF_DTYPES and not matrix:
        # pointwise math on half types runs in float32 (torch's opmath), so float32 is their roof
        # when neither a half-precision vector ceiling nor datasheet figure exists
        order.append((CeilingKind.VECTOR, "float32"))
    for kind, dt in order:
        c = dc.get(kind, dtype=dt)
        if c is not None:
            return c
        if dc.spec is not None:
            fig = dc.spec.peak_tflops(dt, matrix=kind == CeilingKind.MATRIX)
            if fig is not None:
                return Roof(fig.value, "datasheet", f"{dc.spec.key}: {fig.source}", f"{kind} {dt} (datasheet)")
    return None


@dataclass(frozen=True)
class Traffic:
    """A case's bytes as its bandwidth roof is chosen by (the module doc): how many, the cache mode
    it was measured in, and of them those read and those written (None: the split unknown, when
    `read_only` says whether the op only reads)."""

    nbytes: float
    cache: str = CacheMode.COLD
    bytes_read: float | None = None
    bytes_written: float | None = None
    read_only: bool = False

    @classmethod
    def of(cls, row: pd.Series) -> Traffic:
        """A result row's traffic (a frame without the split columns: the split unknown)."""
        return cls(_number(row.get("bytes")) or 0.0, str(row.get("cache")), _number(row.get("bytes_read")),
                   _number(row.get("bytes_written")), reads_only(str(row.get("op"))))

    @property
    def split(self) -> tuple[float, float] | None:
        if self.bytes_read is None or self.bytes_written is None:
            return None
        return self.bytes_read, self.bytes_written


def _number(value: object) -> float | None:
    number = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return None if pd.isna(number) else float(number)


def fits_in_cache(dc: DeviceCeilings, traffic: Traffic) -> bool:
    """Whether the case's working set fits in the L2 (the LLC): its bytes within the device's L2
    size, whatever the cache mode; with the L2 size unknown, a hot case fits and a cold one does not."""
    if not dc.l2_bytes:
        return traffic.cache == CacheMode.HOT
    return traffic.nbytes <= dc.l2_bytes


def mixed_gbps(bytes_read: float, bytes_written: float, read_gbps: float, write_gbps: float) -> float:
    """The rate (GB/s) of a mix: its bytes over the time its reads take at the read roof plus the time
    its writes take at the write roof."""
    seconds = bytes_read / read_gbps + bytes_written / write_gbps
    return (bytes_read + bytes_written) / seconds


def bandwidth_roof(dc: DeviceCeilings, traffic: Traffic | None = None) -> Roof | None:
    """The bandwidth roof in GB/s a case with `traffic` is held against (the module doc): the L2
    ceiling for a working set that fits in it (None without one: never HBM), else `memory_roof`.
    Without `traffic`: the HBM roof of a cold case."""
    if traffic is not None and fits_in_cache(dc, traffic):
        c = dc.get(CeilingKind.L2)
        return Roof(c.value, "measured", c.case_key, c.label) if c is not None else None
    return memory_roof(dc, traffic)


def memory_roof(dc: DeviceCeilings, traffic: Traffic | None = None) -> Roof | None:
    """The HBM roof of `traffic` by its mix of reads and writes (the module doc), measured first,
    else the datasheet's memory figure; without `traffic`, that of a case that reads and writes."""
    source = _memory_source(dc, traffic)
    if isinstance(source, Ceiling):
        return Roof(source.value, "measured", source.case_key, source.label)
    if source is not None:
        return source
    if dc.spec is not None:
        return Roof(dc.spec.memory_gbps.value, "datasheet", f"{dc.spec.key}: {dc.spec.memory_gbps.source}",
                    "hbm (datasheet)")
    return None


def _bandwidth_source(dc: DeviceCeilings, traffic: Traffic) -> Ceiling | Roof | None:
    """The measured ceiling a case's bandwidth roof is, the roof of its mix of two, or None."""
    if fits_in_cache(dc, traffic):
        return dc.get(CeilingKind.L2)
    return _memory_source(dc, traffic)


def _memory_source(dc: DeviceCeilings, traffic: Traffic | None) -> Ceiling | Roof | None:
    """The measured HBM ceiling of `traffic`, the roof of its mix of two, or None (the datasheet's)."""
    rw, ro, wo = (dc.get(kind) for kind in HBM_CEILINGS)
    split = traffic.split if traffic is not None else None
    if split is None or split == (0.0, 0.0):
        order = [ro, rw] if traffic is not None and traffic.read_only else [rw, ro]
        return next((c for c in order if c is not None), None)
    read_roof, write_roof = ro or rw, wo or rw
    bytes_read, bytes_written = split
    if read_roof is None or write_roof is None:  # a side with no roof: the one measured memory roof
        return next((c for c in (rw, ro, wo) if c is not None), None)
    if bytes_written == 0 or read_roof is write_roof:
        return read_roof
    if bytes_read == 0:
        return write_roof
    value = mixed_gbps(bytes_read, bytes_written, read_roof.value, write_roof.value)
    return Roof(value, "measured", f"{read_roof.case_key} + {write_roof.case_key}",
                f"{read_roof.kind}+{write_roof.kind} mix")


def launch_floor_ms(dc: DeviceCeilings, timing_mode: str) -> float | None:
    c = dc.get(CeilingKind.LAUNCH, timing_mode=timing_mode)
    return c.value if c else None
