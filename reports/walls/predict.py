"""Roofline predictions for an op at a shape on a device, before anything is run.

The op's own FLOP and byte models (suite.ops.registry) give the intensity; the device's roofs come
from its measured ceilings when the database has them, else from the datasheet table. Each roof
says which it is. A collective (family collective; `ranks` must be a number) is held against the
interconnect roof of that collective and world size instead (reports/roofs/interconnect.py): its bus
bytes over that roof are its time, `overhead` below its latency floor, `comms` otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from rooflab.reports.data.frames import device_names, select_device
from rooflab.reports.errors import ReportInputError
from rooflab.reports.roofs.ceilings import (
    Traffic,
    bandwidth_roof,
    compute_ceilings,
    compute_roof,
    launch_floor_ms,
    memory_roof,
    uses_matrix_units,
)
from rooflab.reports.roofs.gpu_specs import SPECS, match_device
from rooflab.reports.roofs.interconnect import interconnect_roof, latency_floor_ms
from rooflab.reports.roofs.models import COLLECTIVE_FAMILY, DeviceCeilings, Roof
from rooflab.reports.walls.roofline_rule import Roofs, roofline_bound
from rooflab.suite.ops.base import ParamValueError, byte_split
from rooflab.suite.ops.registry import all_ops, get_op
from rooflab.vocab import CacheMode, TimingMode


@dataclass(frozen=True)
class Prediction:
    op: str
    params: dict
    dtype: str
    device: str
    flops: int
    bytes: int
    intensity: float  # FLOP/byte
    compute_tflops: float
    compute_origin: str  # measured | datasheet
    compute_source: str
    bandwidth_gbps: float
    bandwidth_origin: str
    bandwidth_source: str
    ridge_flop_per_byte: float
    roofline_ms: float
    attainable_tflops: float
    wall: str | None  # compute | bandwidth | overhead | comms; None for an op that does no work, without a floor
    launch_floor_ms: float | None  # for a collective: its latency floor
    collective: bool = False  # the bandwidth roof is the interconnect's, and there is no compute roof

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def parse_shape(text: str) -> dict[str, int | float | bool | str]:
    """`m=4096,n=4096,k=4096` -> {"m": 4096, ...}; ints, floats, true/false, else strings."""
    out: dict[str, int | float | bool | str] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        name, sep, raw = part.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not name or not raw:
            raise ReportInputError(f"--shape: {part!r} is not of the form name=value (e.g. m=4096,n=4096,k=4096)")
        low = raw.lower()
        if low in ("true", "false"):
            out[name] = low == "true"
            continue
        for conv in (int, float):
            try:
                out[name] = conv(raw)
                break
            except ValueError:
                continue
        else:
            out[name] = raw
    return out


def resolve_op_params(op_name: str, shape: dict, dtype: str):
    """(op, resolved params) after checking the op, parameter names, required ones and the dtype."""
    try:
        op = get_op(op_name)
    except KeyError:
        raise ReportInputError(f"unknown op {op_name!r}; known ops: {', '.join(all_ops())}") from None
    unknown = sorted(set(shape) - set(op.params))
    if unknown:
        raise ReportInputError(
            f"--shape: op {op_name!r} has no parameter {', '.join(unknown)}; its parameters: {', '.join(op.params)}")
    params = op.with_defaults(shape)
    missing = [name for name in op.params if name not in params]
    if missing:
        raise ReportInputError(f"--shape: op {op_name!r} needs {', '.join(missing)} (parameters: "
                               f"{', '.join(op.params)})")
    for name, spec in op.params.items():
        try:
            params[name] = spec.check(params[name], name, op_name)  # the spec's own check (suite.ops.base)
        except ParamValueError as exc:
            raise ReportInputError(f"--shape: {exc}") from None
    if dtype not in op.dtypes:
        raise ReportInputError(f"--dtype: op {op_name!r} does not take {dtype!r}; allowed: {', '.join(op.dtypes)}")
    return op, params


def device_ceilings(device: str, df: pd.DataFrame | None) -> DeviceCeilings:
    """Measured ceilings when the results name this device, else an empty set over its datasheet entry."""
    if df is not None and not df.empty:
        try:
            name, rows = select_device(df, device)
        except ReportInputError:
            name, rows = None, None
        if name is not None:
            return compute_ceilings(rows, name)
    spec = match_device(device)
    if spec is None:
        known = [s.key for s in SPECS] + (device_names(df) if df is not None else [])
        raise ReportInputError(
            f"--device: {device!r} is neither in the database nor in the datasheet table; known: {', '.join(known)}")
    return DeviceCeilings(device_name=spec.key, spec=spec, l2_bytes=int(spec.l2_bytes.value) if spec.l2_bytes else 0,
                          ceilings=())


def predict(op_name: str, shape: dict, dtype: str, device: str, df: pd.DataFrame | None = None, *,
            cache: str = CacheMode.COLD, timing_mode: str = TimingMode.LAUNCH) -> Prediction:
    """Intensity, ridge point, wall, roofline time and attainable FLOP/s of one case on one device."""
    op, params = resolve_op_params(op_name, shape, dtype)
    dc = device_ceilings(device, df)
    if op.family == COLLECTIVE_FAMILY:
        return _collective_prediction(op, params, dtype, dc, device)
    flops, nbytes = int(op.flops(params, dtype)), int(op.bytes(params, dtype))
    croof = compute_roof(dc, dtype, matrix=uses_matrix_units(op.family, dtype))
    read, written = byte_split(op, params, dtype) or (None, None)
    traffic = Traffic(nbytes, cache, read, written, op.reads_only)
    # a working set that fits in the L2 of a device whose L2 roof was not measured: the HBM roof, a
    # lower bound of what the cache allows (a prediction, not a judgement of a result)
    broof = bandwidth_roof(dc, traffic) or memory_roof(dc, traffic)
    if croof is None or broof is None:
        raise ReportInputError(
            f"--device {device!r} has no {'compute roof for ' + dtype if croof is None else 'bandwidth roof'} "
            "(neither measured nor in the datasheet table)")
    return _prediction(op_name, params, dtype, dc, flops, nbytes, croof, broof, launch_floor_ms(dc, timing_mode))


def _collective_prediction(op, params: dict, dtype: str, dc: DeviceCeilings, device: str) -> Prediction:
    if not isinstance(params.get("ranks"), int):
        raise ReportInputError(f"--shape: give {op.name}'s world size as a number (e.g. ranks=8), not "
                               f"{params.get('ranks')!r}: the roofs are per collective and world size")
    ranks = int(params["ranks"])
    flops, nbytes = int(op.flops(params, dtype)), int(op.bytes(params, dtype))
    roof = interconnect_roof(dc, op.name, ranks)
    if roof is None:
        raise ReportInputError(f"--device {device!r} has no interconnect roof for {op.name} on {ranks} ranks "
                               "(neither measured nor a datasheet link figure)")
    floor = latency_floor_ms(dc, op.name, ranks)
    bound = roofline_bound(flops, nbytes, Roofs(None, roof.value, floor, collective=True))
    nan = math.nan
    return Prediction(
        op=op.name, params=dict(params), dtype=dtype, device=dc.device_name, flops=flops, bytes=nbytes,
        intensity=flops / nbytes if nbytes else math.inf, compute_tflops=nan, compute_origin="none",
        compute_source="a collective's adds are not held against a compute roof", bandwidth_gbps=roof.value,
        bandwidth_origin=roof.origin, bandwidth_source=roof.source, ridge_flop_per_byte=nan,
        # what the roof allows, but never less than the latency floor: a prediction has no median to hold
        # against the floor, and a message below it takes the floor
        roofline_ms=max(bound.roofline_ms, floor or 0.0), attainable_tflops=nan,
        wall=bound.wall, launch_floor_ms=floor, collective=True,
    )


def _prediction(op_name, params, dtype, dc, flops, nbytes, croof: Roof, broof: Roof, floor) -> Prediction:
    bound = roofline_bound(flops, nbytes, Roofs(croof.value, broof.value, floor))
    return Prediction(
        op=op_name, params=dict(params), dtype=dtype, device=dc.device_name, flops=flops, bytes=nbytes,
        intensity=flops / nbytes if nbytes else math.inf, compute_tflops=croof.value, compute_origin=croof.origin,
        compute_source=croof.source, bandwidth_gbps=broof.value, bandwidth_origin=broof.origin,
        bandwidth_source=broof.source, ridge_flop_per_byte=bound.ridge_flop_per_byte, roofline_ms=bound.roofline_ms,
        attainable_tflops=bound.attainable_tflops, wall=bound.wall, launch_floor_ms=floor,
    )


def ambiguous_device(device: str, df: pd.DataFrame) -> list[str]:
    """The devices `device` could mean when it names more than one (in the database, else in the
    datasheet table), else []. An exact name or key is never ambiguous; a datasheet entry matches
    when every word typed is a word of its key ("A100" matches four entries, "H100 PCIe" one)."""
    text = " ".join(device.strip().lower().replace("_", " ").split())
    names = device_names(df) if df is not None and not df.empty else []
    if any(n.lower() == text for n in names):
        return []
    in_database = [n for n in names if text in n.lower()]
    if in_database:
        return in_database if len(in_database) > 1 else []
    keys = [spec.key for spec in SPECS]
    if any(k.lower() == text for k in keys):
        return []
    words = set(text.split())
    in_datasheet = [k for k in keys if words and words <= set(k.lower().split())]
    return in_datasheet if len(in_datasheet) > 1 else []
