"""Attribution: one profiled execution of an op made of parts, split into its parts.

After a case made of parts (a Prepared with `profiled` and `part_models`, e.g. transformer_block)
has been timed, the worker runs `profiled()` once under torch.profiler. That call opens a range
around the whole call (BLOCK_RANGE) and one around each part (PART_RANGE_PREFIX + name).

- On a GPU a part's time is the sum of the durations of the device kernels (and memcpy/memset)
  launched while its range was open (a kernel is tied to the CPU op that launched it through the
  profiler's correlation id; the autograd thread's launches during the backward range count for
  the backward part). The whole is the span from the first kernel's start to the last kernel's end.
- On a CPU a part's time is the sum of the CPU times of the top-level operators inside its range
  (an operator whose parent is one of the ranges; nested operators are inside their parent's
  time). The whole is the BLOCK_RANGE's own duration.

What no part accounts for is split into `gap_ms` (the whole less the union of the measured
intervals: launch latency and host work between kernels on a GPU, Python between operators on a
CPU), `unattributed_ms` (work inside the whole but outside every part range: reshapes between
parts) and `overlap_ms` (work that ran concurrently, counted twice by the parts). The parts add up:
sum(parts) + unattributed + gap - overlap = whole exactly, so `sum_error` = overlap / whole is the
figure held to PARTS_SUM_TOLERANCE.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rooflab.record import LayerPartRecord, LayerProfileRecord
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import BLOCK_RANGE, PART_RANGE_PREFIX, Part, Prepared
from rooflab.suite.ops.layer_model import PARTS_SUM_TOLERANCE  # noqa: F401 - the tolerance the split is held to

CUDA_CLOCK = "cuda_kernels"
CPU_CLOCK = "cpu_ops"


@dataclass(frozen=True)
class Interval:
    """One profiled event reduced to what the split needs (times in microseconds).

    kind: "range" (a user range: BLOCK_RANGE or a part), "op" (a CPU operator or runtime call) or
    "kernel" (device work). `parent` is the name of the enclosing range or op (CPU events);
    `link` is, for a kernel, the id of the CPU event that launched it, and for a CPU event the
    profiler's linked correlation id (0 for an operator, the operator's id for a runtime call)."""

    name: str
    kind: str
    start_us: float
    end_us: float
    id: int = 0
    parent: str | None = None
    link: int = 0

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


def union_us(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, end_so_far = 0.0, None
    for start, end in sorted(intervals):
        if end_so_far is None or start >= end_so_far:
            total += end - start
            end_so_far = end
        elif end > end_so_far:
            total += end - end_so_far
            end_so_far = end
    return total


def _part_of(name: str) -> str | None:
    return name[len(PART_RANGE_PREFIX):] if name.startswith(PART_RANGE_PREFIX) else None


def split(
    events: Sequence[Interval], part_models: Sequence[Part], *, clock: str, host_ms: float
) -> LayerProfileRecord:
    """The profile record of one profiled call from its events; ValueError when the events do not
    hold the block's range or a part's range."""
    ranges = {e.name: e for e in events if e.kind == "range"}
    block = ranges.get(BLOCK_RANGE)
    if block is None:
        raise ValueError(f"the profile has no {BLOCK_RANGE!r} range")
    names = [p.name for p in part_models]
    missing = [n for n in names if PART_RANGE_PREFIX + n not in ranges]
    if missing:
        raise ValueError(f"the profile has no range for part(s) {', '.join(missing)}")
    if clock == CUDA_CLOCK:
        per_part, whole_us = _kernels_by_part(events, ranges, block, names)
    else:
        per_part, whole_us = _operators_by_part(events, block, names)
    measured = [iv for ivs in per_part.values() for iv in ivs]
    covered_us = union_us(measured)
    summed_us = sum(e - s for s, e in measured)
    parts = tuple(
        LayerPartRecord(
            position=i,
            name=p.name,
            kind=str(p.kind),
            time_ms=sum(e - s for s, e in per_part[p.name]) / 1e3,
            flops=int(p.flops),
            bytes=int(p.bytes),
            events=len(per_part[p.name]),
        )
        for i, p in enumerate(part_models)
    )
    return LayerProfileRecord(
        clock=clock,
        whole_ms=whole_us / 1e3,
        gap_ms=max(0.0, whole_us - covered_us) / 1e3,
        unattributed_ms=sum(e - s for s, e in per_part[None]) / 1e3,
        overlap_ms=(summed_us - covered_us) / 1e3,
        host_ms=host_ms,
        events=len(measured),
        parts=parts,
    )


PerPart = dict[str | None, list[tuple[float, float]]]  # part name (None: inside the block, in no part) -> spans


def _kernels_by_part(events: Sequence[Interval], ranges: dict[str, Interval], block: Interval,
                     names: Sequence[str]) -> tuple[PerPart, float]:
    """The device kernels of one call by the part whose range launched them, and the whole (first
    kernel start to last kernel end). A kernel's link is the correlation id of the operator that
    launched it; operators are preferred over runtime calls (link 0 against a link of their own),
    whose ids may collide."""
    per_part: PerPart = {n: [] for n in names}
    per_part[None] = []
    launchers: dict[int, list[Interval]] = {}
    for e in sorted((e for e in events if e.kind == "op"), key=lambda e: e.link != 0):
        launchers.setdefault(e.id, []).append(e)
    part_ranges = [(n, ranges[PART_RANGE_PREFIX + n]) for n in names]
    for k in (e for e in events if e.kind == "kernel"):
        inside = [op for op in launchers.get(k.link, ()) if block.start_us <= op.start_us <= block.end_us]
        if not inside:
            continue  # not launched by this call
        t = inside[0].start_us
        owner = next((n for n, r in part_ranges if r.start_us <= t <= r.end_us), None)
        per_part[owner].append((k.start_us, k.end_us))
    measured = [iv for ivs in per_part.values() for iv in ivs]
    if not measured:
        raise ValueError("no device kernel was launched inside the block's range")
    return per_part, max(e for _, e in measured) - min(s for s, _ in measured)


def _operators_by_part(events: Sequence[Interval], block: Interval, names: Sequence[str]) -> tuple[PerPart, float]:
    """The top-level CPU operators of one call by the part range they ran in, and the block's range."""
    per_part: PerPart = {n: [] for n in names}
    per_part[None] = []
    for op in events:
        if op.kind != "op" or op.parent is None:
            continue
        if op.parent == BLOCK_RANGE:
            per_part[None].append((op.start_us, op.end_us))
        elif (name := _part_of(op.parent)) is not None and name in per_part:
            per_part[name].append((op.start_us, op.end_us))
    return per_part, block.duration_us


def _is_range(name: str) -> bool:
    return name == BLOCK_RANGE or name.startswith(PART_RANGE_PREFIX)


def _intervals(prof: Any, device: DeviceInfo) -> list[Interval]:
    """The profiler's events as Intervals: on a GPU from its raw events (`_device_intervals`), on a
    CPU from its FunctionEvents, which know each operator's parent (`_cpu_intervals`)."""
    if device.is_cuda:
        return _device_intervals(prof.profiler.kineto_results.events())
    return _cpu_intervals(prof.events())


def _cpu_intervals(events: Iterable[Any]) -> list[Interval]:
    """Ranges and operators (with their parent) from torch.profiler's FunctionEvent list."""
    from torch.autograd import DeviceType

    out = []
    for e in events:
        if e.device_type != DeviceType.CPU:
            continue
        start, end = float(e.time_range.start), float(e.time_range.end)
        if e.is_user_annotation and _is_range(e.name):
            out.append(Interval(e.name, "range", start, end, int(e.id)))
        elif not e.is_user_annotation and not e.is_async:
            parent = e.cpu_parent.name if e.cpu_parent is not None else None
            out.append(Interval(e.name, "op", start, end, int(e.id), parent))
    return out


def _device_intervals(events: Iterable[Any]) -> list[Interval]:
    """Ranges, operators and runtime calls (with their link) and device kernels from the profiler's
    raw events (`kineto_results.events()`, in ns). A kernel is tied to the call that launched it by
    the raw event's linked correlation id, which torch keeps there in every version; a FunctionEvent
    carries it in torch 2.13 but not in 2.11, where reading it failed every GPU attribution."""
    from torch.autograd import DeviceType

    out = []
    for k in events:
        name, device_type = k.name(), k.device_type()
        start, end = k.start_ns() / 1e3, k.end_ns() / 1e3
        annotation = k.is_user_annotation()
        if device_type == DeviceType.CPU:
            if annotation and _is_range(name):
                out.append(Interval(name, "range", start, end, int(k.correlation_id())))
            elif not annotation and not (k.is_async() or k.start_thread_id() != k.end_thread_id()):
                out.append(Interval(name, "op", start, end, int(k.correlation_id()), None,
                                    int(k.linked_correlation_id())))
        # the range names are excluded: their device-side copies are not kernels
        elif device_type == DeviceType.CUDA and not annotation and not _is_range(name):
            out.append(Interval(name, "kernel", start, end, int(k.correlation_id()), None,
                                int(k.linked_correlation_id())))
    return out


def profile_parts(profiled: Callable[[], object], part_models: Sequence[Part], device: DeviceInfo
                  ) -> LayerProfileRecord:
    """Run `profiled()` once under torch.profiler and split it into `part_models`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.is_cuda else [])
    with profile(activities=activities) as prof:
        if device.is_cuda:
            torch.cuda.synchronize(torch.device(device.torch_device))
        t0 = time.perf_counter_ns()
        output = profiled()
        if device.is_cuda:
            torch.cuda.synchronize(torch.device(device.torch_device))
        host_ms = (time.perf_counter_ns() - t0) / 1e6
    del output
    clock = CUDA_CLOCK if device.is_cuda else CPU_CLOCK
    return split(_intervals(prof, device), part_models, clock=clock, host_ms=host_ms)


def attribute(prepared: Prepared, device: DeviceInfo) -> tuple[LayerProfileRecord | None, str | None]:
    """(profile, None) for a prepared case made of parts, (None, None) for any other case, and
    (None, why) when profiling failed (the timing stands; the reason is kept with it)."""
    profiled = prepared.profiled
    models = tuple(prepared.part_models)
    if profiled is None or not models:
        return None, None
    try:
        return profile_parts(profiled, models, device), None
    except Exception as exc:  # noqa: BLE001 - an attribution failure must not lose the timing
        text = str(exc).strip().splitlines()
        return None, f"attribution failed: {type(exc).__name__}: {text[0] if text else ''}"
