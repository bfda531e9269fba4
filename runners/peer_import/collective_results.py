"""nccl-tests and rccl-tests rows as rooflab's collective results (suite/ops/collective.py).

Each printed half (out-of-place, in-place) of each row is one result of rooflab's collective of that
name (`all_reduce_perf` -> `all_reduce`, `alltoall_perf` -> `all_to_all`, `sendrecv_perf` ->
`send_recv`; of two ranks read through the format table's sendrecv row, the pair `sendrecv_pairs`,
below), params as rooflab's own cases have them: `n` = nccl-tests' count (elements per rank),
`ranks` = the world size (the `# Using devices` lines, checked against the sizes and the
busbw/algbw ratio), `reduce_op` = the redop, `inplace` where the op takes it. rooflab's all_reduce and
broadcast run in place and its all_to_all and send_recv out of place (torch.distributed has no other
form), so those halves carry rooflab's own key and the other half adds `inplace` to it. Bytes and
FLOPs are the op's model; the printed busbw and algbw travel with each result, for the rule every import
keeps (agreement.py: re-derived from the stored bytes and time, they must give the printed figures). A
half nccl-tests found wrong (`#wrong` > 0), or any half of a test whose
footer says `Out of bounds values : N FAILED` without naming the rows, is `incorrect`.

A `sendrecv_perf` of two ranks, read through the format table's row for it (format_table.py), is the
pair of rooflab's link matrix (suite/ops/pairs.py): `sendrecv_pairs` with `ranks` 2, `direction` both
(each rank sends to the other at once, as nccl-tests' ring of two does) and both ends from the device
lines (host, and a device key of the host and the bus id); S = n·s and busbw = algbw, as the ring's.
Its in-place half has no pair counterpart and is left out.

Tests rooflab has no model of (reduce, gather, scatter, hypercube, alltoallv) and dtypes it has no
name for (uint8, uint32, int64, uint64) are left out, each with its reason.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rooflab.record import (
    CaseRecord,
    CollectiveRecord,
    Identity,
    MeasurementRecord,
    Statistics,
    TimingMethod,
)
from rooflab.runners.engine.stats import summarize
from rooflab.runners.peer_import.nccl_records import NcclHalf, NcclRow, NcclTest, RankDevice
from rooflab.runners.peer_import.printed import Printed, PrintedRate
from rooflab.runners.peer_import.results import Imported, mean_ci, naive_as_utc, note, point_statistics
from rooflab.suite.case import Case
from rooflab.suite.dtypes import element_size
from rooflab.suite.ops.base import work_model
from rooflab.suite.ops.collective import CollectiveOp
from rooflab.suite.ops.pairs import PairEnds
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CacheMode, CollectiveMode, FlushMethod, Pace, PairDirection, ResultStatus, TimingMode

BACKEND = "nccl"  # torch.distributed's name for NCCL and for RCCL alike
OPS = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather", "allgather": "all_gather",
       "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter", "alltoall": "all_to_all",
       "all_to_all": "all_to_all", "broadcast": "broadcast", "sendrecv": "send_recv", "send_recv": "send_recv"}
UNMODELLED = ("reduce", "gather", "scatter", "hypercube", "alltoallv", "all_reduce_bias")
DTYPES = {"float": "float32", "float32": "float32", "half": "float16", "float16": "float16",
          "bfloat16": "bfloat16", "double": "float64", "float64": "float64", "int8": "int8", "char": "int8",
          "int32": "int32", "int": "int32", "f8e4m3": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
          "f8e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2"}
NATIVE_INPLACE = {"all_reduce": True, "broadcast": True, "all_to_all": False, "send_recv": False}
_NOT_REDUCING = (None, "none", "")  # no redop column; `none` (gathers, broadcasts); left blank (2020's alltoall)


def op_name(program: str | None) -> str | None:
    """rooflab's collective for a test binary or an rccl-tests `name` (None: not a collective
    rooflab models)."""
    if not program:
        return None
    base = program.rsplit("/", 1)[-1].lower()
    for suffix in ("_mpi", "_perf"):
        base = base.removesuffix(suffix)
    return OPS.get(base) or OPS.get(base.replace("_", ""))


def unmodelled(program: str | None) -> bool:
    base = (program or "").rsplit("/", 1)[-1].lower().removesuffix("_mpi").removesuffix("_perf")
    return base in UNMODELLED or base.replace("_", "") in {u.replace("_", "") for u in UNMODELLED}


def infer_op(row: NcclRow, ranks: int | None) -> tuple[str | None, str]:
    """rooflab's collective read from a row's numbers and the table's columns when the output never names
    its binary, or (None, why) when they leave it open.

    A size of count x element size is all_reduce (with a redop), broadcast (with a root) or send_recv; a size
    of count x element size x ranks is reduce_scatter (with a redop), alltoall of 2020 (a redop column the
    rows leave blank: nccl-tests 119a0ec..d313d20) or all_gather of that era (no redop and no root column,
    which rules out that era's alltoall). Later versions print `none` and `-1` for gathers and alltoall
    alike: such a table needs its binary's name (the `# Collective test starting` line, or a command line)."""
    dtype = DTYPES.get(row.dtype.lower())
    if dtype is None or row.count == 0:
        return None, "no row tells which collective it is"
    per = row.size_bytes / (row.count * element_size(dtype))
    reducing = row.redop not in _NOT_REDUCING
    rooted = row.root is not None and row.root >= 0
    if per == 1:
        if rooted:
            return ("broadcast", "") if not reducing else (None, "a rooted reduction (reduce) has no rooflab model")
        return ("all_reduce", "") if reducing else ("send_recv", "")
    if ranks is not None and per != ranks:
        return None, f"its sizes say {per:g} ranks, its device lines {ranks}"
    if reducing and not rooted:
        return "reduce_scatter", ""
    if row.redop == "" and row.root is None:
        return "all_to_all", ""
    if row.redop is None and row.root is None:
        return "all_gather", ""
    return None, ("the output never names its test binary, and its numbers fit all_gather and alltoall alike"
                  if not rooted else "a rooted gather or scatter has no rooflab model")


def world_size(test: NcclTest, op: CollectiveOp) -> tuple[int | None, str]:
    """The ranks of a test: its device lines, checked against its sizes (gathers) and its
    busbw/algbw ratio; (None, why) when they disagree or say nothing. Lines that name fewer ranks than
    the figures count (a log filtered down, even to rank 0's line alone) name only some of them."""
    ranks = {d.rank for d in test.devices}
    from_sizes = _ranks_from_sizes(test, op)
    from_ratio = _ranks_from_ratio(test, op)
    more = max(from_sizes or 0, from_ratio or 0) > len(ranks)  # the figures count ranks the lines do not name
    if ranks and (ranks != set(range(len(ranks))) or more):
        return _partial_world(sorted(ranks), from_sizes, from_ratio)
    listed = len(ranks) if ranks else test.declared_ranks
    if listed is not None and from_sizes is not None and listed != from_sizes:
        return None, f"the device lines list {listed} ranks, the sizes say {from_sizes}"
    if listed is not None and from_ratio is not None and listed != from_ratio:
        return None, f"the device lines list {listed} ranks, busbw / algbw says {from_ratio}"
    found = listed or from_sizes or from_ratio
    if found:
        return found, ""
    return None, "the output says nowhere how many ranks ran" + ("" if test.devices else " (give --ranks)")


def _partial_world(ranks: list[int], from_sizes: int | None, from_ratio: int | None) -> tuple[int | None, str]:
    """The world size when the device lines name only some ranks (a log filtered to a few lines):
    they say only that it is above the highest rank; the sizes or busbw / algbw must tell it."""
    named = ", ".join(map(str, ranks))
    found = {n for n in (from_sizes, from_ratio) if n is not None}
    if len(found) > 1:
        return None, f"the sizes say {from_sizes} ranks, busbw / algbw says {from_ratio}"
    if not found:
        return None, f"the device lines name ranks {named} only, and nothing else says how many ranks ran"
    world = found.pop()
    if world <= ranks[-1]:
        return None, f"the device lines name rank {ranks[-1]}, but the {'sizes' if from_sizes else 'busbw / algbw'} "\
                     f"say {world} ranks"
    return world, ""


def _ranks_from_sizes(test: NcclTest, op: CollectiveOp) -> int | None:
    if not op.size_ranks:
        return None
    for row in test.rows:
        dtype = DTYPES.get(row.dtype.lower())
        if dtype and row.count and row.size_bytes % (row.count * element_size(dtype)) == 0:
            return row.size_bytes // (row.count * element_size(dtype))
    return None


def _ranks_from_ratio(test: NcclTest, op: CollectiveOp) -> int | None:
    halves = [h for r in test.rows for h in (r.out_of_place, r.in_place) if h is not None and h.algbw_gbps.value > 0]
    if not halves or op.factor(2) == op.factor(64):
        return None
    best = max(halves, key=lambda h: h.algbw_gbps.value)
    ratio = best.busbw_gbps.value / best.algbw_gbps.value
    fits = [n for n in range(2, 4097) if abs(op.factor(n) - ratio) <= _ratio_slack(best)]
    return fits[0] if len(fits) == 1 else None


def _ratio_slack(half: NcclHalf) -> float:
    """How far busbw / algbw may lie from the factor through the two figures' rounding."""
    a, b = half.algbw_gbps, half.busbw_gbps
    return b.value / a.value * a.half_ulp / a.value + b.half_ulp / a.value


@dataclass(frozen=True)
class TableContext:
    """What every result of one test shares."""

    test: NcclTest
    op: CollectiveOp
    ranks: int
    run_id: str
    fingerprint: str
    device_uuid: str | None
    measured_at: datetime
    tool: str
    tool_version: str | None
    ends: PairEnds | None = None  # a two-rank sendrecv_perf read as the pair of the link matrix


def device_text(d: RankDevice) -> str:
    return f"{d.host} cuda:{d.device} {d.bus_id} {d.gpu_name}".strip()


def _params(ctx: TableContext, row: NcclRow, inplace: bool) -> dict[str, Any]:
    if ctx.ends is not None:  # the pair of the link matrix: both ways at once, its ends named
        return ctx.op.resolved_params({"n": row.count, "ranks": ctx.ranks, "direction": PairDirection.BOTH.value,
                                       **ctx.ends.params()})
    params: dict[str, Any] = {"n": row.count, "ranks": ctx.ranks}
    if "reduce_op" in ctx.op.params and row.redop not in _NOT_REDUCING:
        params["reduce_op"] = row.redop
    if "inplace" in ctx.op.params:
        params["inplace"] = inplace
    elif inplace != NATIVE_INPLACE[ctx.op.name]:
        params["inplace"] = inplace  # the half rooflab's own op never runs (see the module doc)
    if ctx.op.name == "broadcast" and row.root not in (None, -1, 0):
        params["root"] = row.root
    return ctx.op.resolved_params(params)


def _status(ctx: TableContext, half: NcclHalf) -> tuple[str, str | None]:
    if half.wrong is not None and not half.wrong_is_delta and half.wrong > 0:
        return ResultStatus.INCORRECT, f"{ctx.tool} found {half.wrong:g} wrong elements (#wrong)"
    counted = any(h.wrong is not None and not h.wrong_is_delta and h.wrong > 0
                  for r in ctx.test.rows for h in (r.out_of_place, r.in_place) if h is not None)
    if ctx.test.out_of_bounds_failed and not counted:
        return ResultStatus.INCORRECT, (f"{ctx.tool}'s footer says Out of bounds values: "
                                        f"{ctx.test.out_of_bounds} FAILED (no row names it)")
    return ResultStatus.OK, None


def _time_us(ctx: TableContext, half: NcclHalf, size: int) -> tuple[Printed, str | None]:
    """The time of one operation: the printed time, or under -C (whose time column is the CPU time of
    the launches) the time its algbw implies."""
    if not ctx.test.time_is_cputime:
        return half.time_us, None
    algbw = half.algbw_gbps
    if algbw.value <= 0:
        return half.time_us, "cputime: no algbw to read the operation's time from"
    t = size / (algbw.value * 1e9) * 1e6
    return (Printed(t, t * algbw.half_ulp / algbw.value),
            f"-C: the time is size / algbw (the printed cputime {half.time_us.value:g} us is the CPU time of "
            "the launches)")


def _statistics(ctx: TableContext, half: NcclHalf, time_ms: float) -> tuple[Statistics, tuple[float, ...]]:
    stats = half.per_iteration
    samples = tuple(t / 1000.0 for t in stats.times_us) if stats is not None else ()
    if samples and all(s > 0 for s in samples):
        found = summarize(samples)
        return Statistics(**{**found.__dict__, "median_ms": time_ms, "mean_ms": time_ms}), samples
    cv = stats.cv_pct.value / 100.0 if stats is not None and stats.cv_pct is not None else None
    iters = ctx.test.settings.iters
    return point_statistics(
        time_ms, min_ms=stats.min_us.value / 1000 if stats is not None and stats.min_us else None,
        max_ms=stats.max_us.value / 1000 if stats is not None and stats.max_us else None,
        std_ms=cv * time_ms if cv is not None else None, rel_ci=mean_ci(cv, iters)), ()


def _printed(row: NcclRow, half: NcclHalf, time: Printed, size: int, nbytes: int,
             where: str) -> tuple[PrintedRate, ...]:
    """The half's busbw and algbw as printed, and what they are rates of: the stored bytes (algbw: the
    size, bytes / the bus factor) over the stored time, which is the printed time (or, under -C, the
    time algbw gives)."""
    slack = time.half_ulp / time.value
    return (PrintedRate("busbw", half.busbw_gbps, where, row.line, time_slack=slack),
            PrintedRate("algbw", half.algbw_gbps, where, row.line, scale=size / nbytes if nbytes else 0.0,
                        time_slack=slack))


def _collective(ctx: TableContext, half: NcclHalf) -> CollectiveRecord:
    per_process = half.per_iteration.per_process_times_us if half.per_iteration else ()
    medians = tuple(statistics.median(p) / 1000 for p in per_process if p) if len(per_process) == ctx.ranks else ()
    return CollectiveRecord(ranks=ctx.ranks, rank_medians_ms=medians,
                            rank_devices=tuple(device_text(d) for d in ctx.test.devices),
                            comm_version=ctx.test.library_version, comm_settings=dict(ctx.test.env))


def half_result(ctx: TableContext, row: NcclRow, half: NcclHalf, inplace: bool,
                dtype: str) -> tuple[Imported | None, str | None]:
    """One half as a result with the rates the file printed for it (None with the reason when it is left out)."""
    params = _params(ctx, row, inplace)
    size = ctx.op.size_bytes(params, dtype)
    if size != row.size_bytes:
        return None, (f"line {row.line}: size {row.size_bytes} B is not {ctx.op.name}'s {size} B at "
                      f"{ctx.ranks} ranks: left out")
    time, time_note = _time_us(ctx, half, size)
    if not time.value > 0:
        return None, f"line {row.line}: time {time.value:g} us: left out"
    work = work_model(ctx.op, params, dtype)
    status, why = _status(ctx, half)
    stats, samples = _statistics(ctx, half, time.value / 1000.0)
    case = Case(op=ctx.op.name, op_version=ctx.op.version, family=ctx.op.family, backend=BACKEND, dtype=dtype,
                cache=CacheMode.HOT, timing_mode=TimingMode.LAUNCH, params=params)
    when = naive_as_utc(row.timestamp) if row.timestamp else None
    settings = ctx.test.settings
    record = MeasurementRecord(
        identity=Identity(run_id=ctx.run_id, case=CaseRecord(case.case_key, case.op, case.op_version, case.family,
                                                             case.backend, case.dtype, case.params),
                          device_fingerprint=ctx.fingerprint, device_uuid=ctx.device_uuid,
                          measured_at=when or ctx.measured_at),
        status=status, error=note([why, time_note]),
        method=TimingMethod(cache=CacheMode.HOT, timing_mode=TimingMode.LAUNCH, warmup_calls=settings.warmup_iters or 0,
                            launches_per_sample=max(1, (settings.iters or 1) * (settings.agg_iters or 1)),
                            flush_method=FlushMethod.NONE, pace=Pace.BACK_TO_BACK,
                            collective_mode=CollectiveMode.STREAM, tool=ctx.tool, tool_version=ctx.tool_version),
        stats=stats, work=work, samples_ms=samples, collective=_collective(ctx, half))
    where = f"the {'in-place' if inplace else 'out-of-place'} half of size {row.size_bytes} B"
    return Imported(record, _printed(row, half, time, size, work.bytes, where)), None


def rounded_repeats(rows: Sequence[NcclRow]) -> dict[int, NcclRow]:
    """The rows (by index) that print again the size of the row kept just before them, with that row.

    nccl-tests rounds each size of its sweep down to whole elements and prints the rounded size, so
    two requested sizes can print as one (`-b 1` with float: 1 B and 2 B are both a row of 0 B; `-i`
    steps smaller than an element). Such a row is the same case measured twice within one sweep, not
    a new run. A table of one size only is not a sweep: its repeated rows are `-N` cycles, kept."""
    if len({r.size_bytes for r in rows}) < 2:
        return {}
    repeats: dict[int, NcclRow] = {}
    kept: NcclRow | None = None
    for index, row in enumerate(rows):
        key = (row.size_bytes, row.count, row.dtype, row.redop, row.root)
        if kept is not None and key == (kept.size_bytes, kept.count, kept.dtype, kept.redop, kept.root):
            repeats[index] = kept
        else:
            kept = row
    return repeats


def results_of_table(ctx: TableContext) -> tuple[list[Imported], list[str]]:
    """Every half of a test's rows as results, and the halves left out (with why)."""
    results, left_out = [], []
    repeats = rounded_repeats(ctx.test.rows)
    for index, row in enumerate(ctx.test.rows):
        if index in repeats:
            left_out.append(f"line {row.line}: size {row.size_bytes} B again right after line {repeats[index].line} "
                            "(nccl-tests printed two requested sizes rounded down to one): the first row is kept")
            continue
        dtype = DTYPES.get(row.dtype.lower())
        if dtype is None:
            left_out.append(f"line {row.line}: dtype {row.dtype!r} has no rooflab name")
            continue
        for inplace, half in ((False, row.out_of_place), (True, row.in_place)):
            if half is None or (inplace and ctx.ends is not None):
                continue
            item, why = half_result(ctx, row, half, inplace, dtype)
            if item is not None:
                results.append(item)
            if why:
                left_out.append(why)
    if ctx.ends is not None and any(row.in_place is not None for row in ctx.test.rows):
        left_out.append(f"lines {ctx.test.rows[0].line}-{ctx.test.rows[-1].line}: the in-place halves: a pair of the "
                        "link matrix sends from one buffer into another (out of place): left out")
    return results, left_out


def first_device(devices: Sequence[RankDevice]) -> RankDevice | None:
    return min(devices, key=lambda d: d.rank) if devices else None


def collective_op(name: str) -> CollectiveOp:
    op = get_op(name)
    assert isinstance(op, CollectiveOp)
    return op
