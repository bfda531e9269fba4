"""A loaded spec turned into cases: each benchmark's ops, backends, dtypes, modes and devices checked
against the op library, its parameter axes typed and swept (suite/sweep.py), its timing settings
merged (defaults, then the benchmark's own), and every case keyed. A name or value that is not
allowed is refused with the file, line and field, what is wrong and what is allowed.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rooflab.suite import sweep
from rooflab.suite.case import BACKENDS, DTYPES, Case, mode_conflict, split_mode
from rooflab.suite.errors import SpecError
from rooflab.suite.ops.base import Op, ParamValueError
from rooflab.suite.ops.registry import all_ops
from rooflab.suite.spec_schema import Benchmark, Spec
from rooflab.suite.timing import TimingSettingError, TimingSettings
from rooflab.suite.yaml_lines import NodePath, format_path
from rooflab.vocab import CACHE_MODES, TIMING_MODES, CacheMode, DeviceKind, TimingMode, device_kind_of

DEVICE_KINDS = tuple(DeviceKind)


DEFAULT_BACKENDS = ("eager",)


DEFAULT_DTYPES = ("float32",)


DEFAULT_CACHE = (CacheMode.COLD,)


DEFAULT_TIMING_MODES = (TimingMode.LAUNCH,)


def ops_or_registry(ops: Mapping[str, Op] | None) -> Mapping[str, Op]:
    if ops is not None:
        return ops

    return all_ops()


@dataclass(frozen=True)
class _Plan:
    """A benchmark with defaults applied and its sweep validated, ready to produce cases."""

    index: int
    bench: Benchmark
    op: Op
    backends: tuple[str, ...]
    dtypes: tuple[str, ...]
    cache: tuple[str, ...]
    timing_modes: tuple[str, ...]
    devices: tuple[str, ...] | None
    tags: tuple[str, ...]
    timing: TimingSettings
    max_memory_fraction: float | None
    axes: tuple[sweep.Axis, ...]

    @property
    def size(self) -> int:
        return (
            sweep.count_points(list(self.axes))
            * len(self.backends)
            * len(self.dtypes)
            * len(self.cache)
            * len(self.timing_modes)
        )


def _choose(
    i: int, key: str, bench_value: list[str] | None, default_value: list[str] | None, fallback: tuple[str, ...]
) -> tuple[tuple[str, ...], NodePath, bool]:
    """The benchmark's list, else the defaults' list, else the built-in default; with where it came from."""
    if bench_value is not None:
        return tuple(bench_value), ("benchmarks", i, key), True
    if default_value is not None:
        return tuple(default_value), ("defaults", key), True
    return tuple(fallback), ("benchmarks", i), False


def _check_names(
    spec: Spec,
    chosen: tuple[tuple[str, ...], NodePath, bool],
    kind: str,
    allowed: Iterable[str],
    known: Iterable[str],
    op: str,
) -> tuple[str, ...]:
    """Each value must be one of `allowed` (what the op supports); `known` tells a typo from a gap."""
    values, at, written = chosen
    allowed, known = tuple(allowed), tuple(known)
    if not values:
        raise SpecError(f"{spec.where(at)}: empty sweep: no {kind} given; allowed: {', '.join(allowed)}")
    for j, value in enumerate(values):
        if value not in allowed:
            what = f"op {op!r} does not support {kind} {value!r}" if value in known else f"unknown {kind} {value!r}"
            if not written:
                what += f" (the built-in default: give {_field_of(kind)} for this benchmark or in defaults)"
            raise SpecError(f"{spec.where(at + (j,) if written else at)}: {what}; allowed: {', '.join(allowed)}")
    if len(set(values)) != len(values):
        raise SpecError(f"{spec.where(at)}: a {kind} is listed twice in {list(values)}")
    return values


def _field_of(kind: str) -> str:
    """The spec field that lists values of `kind`."""
    return {"backend": "backends", "dtype": "dtypes", "cache mode": "cache", "timing mode": "timing_modes"}.get(
        kind, kind
    )


def _describe_params(op: Op) -> str:
    parts = []
    for name, pspec in op.params.items():
        parts.append(name if pspec.default is not None else f"{name} (required)")
    return ", ".join(parts) or "none"


def _typed_axis(axis: sweep.Axis, op: Op, op_name: str, sources: Mapping[str, tuple[NodePath, Any]]) -> sweep.Axis:
    """The axis with each value checked against the op's ParamSpec; an error points at the list item
    that holds the bad value where it is written out (`sources`: name -> (path below the axis, raw form))."""
    rows = []
    for row in axis.rows:
        checked = []
        for name, value in zip(axis.names, row, strict=True):
            try:
                checked.append(op.params[name].check(value, name, op_name))
            except ParamValueError as exc:
                below, raw = sources.get(name, ((), None))
                index = _item_index(raw, value)
                raise sweep.SweepError(str(exc), below + ((index,) if index is not None else ())) from None
        rows.append(tuple(checked))
    return sweep.Axis(axis.names, tuple(rows), axis.where)


def _item_index(raw: Any, value: Any) -> int | None:
    """Position of `value` among the scalar items of a written-out list, or None."""
    if not isinstance(raw, list):
        return None
    for j, item in enumerate(raw):
        if type(item) is type(value) and item == value:
            return j
    return None


def _build_axes(spec: Spec, i: int, bench: Benchmark, op: Op, op_name: str) -> tuple[sweep.Axis, ...]:
    axes: list[sweep.Axis] = []
    seen: dict[str, NodePath] = {}

    def add(make, where: NodePath, sources: Mapping[str, tuple[NodePath, Any]]) -> None:
        try:
            axis = make()
            for name in axis.names:
                if name not in op.params:
                    raise sweep.SweepError(
                        f"unknown parameter {name!r} of op {op_name!r}; allowed: {_describe_params(op)}"
                    )
                if name in seen:
                    raise sweep.SweepError(f"parameter {name!r} is set twice (also at {format_path(seen[name])})")
                seen[name] = where
            axes.append(_typed_axis(axis, op, op_name, sources))
        except sweep.SweepError as exc:
            raise SpecError(f"{spec.where(where + exc.where)}: {exc.message}") from None

    for key, raw in bench.params.items():
        where: NodePath = ("benchmarks", i, "params", key)
        sources: dict[str, tuple[NodePath, Any]] = {name.strip(): ((), raw) for name in key.split("=")}
        add(lambda key=key, raw=raw, where=where: sweep.tied_axis(key, raw, where, spec.max_cases), where, sources)
    for g, group in enumerate(bench.zip):
        where = ("benchmarks", i, "zip", g)
        sources = {name.strip(): ((key,), raw) for key, raw in group.items() for name in str(key).split("=")}
        add(lambda group=group, where=where: sweep.zip_axis(group, where, spec.max_cases), where, sources)

    missing = [n for n, p in op.params.items() if p.default is None and n not in seen]
    if missing:
        raise SpecError(
            f"{spec.where(('benchmarks', i, 'params'))}: missing required parameter"
            f"{'s' if len(missing) > 1 else ''} {', '.join(missing)} of op {op_name!r}; "
            f"op parameters: {_describe_params(op)}"
        )
    return tuple(axes)


def _op_names(spec: Spec, i: int, bench: Benchmark) -> list[tuple[str, NodePath]]:
    """The benchmark's op names with the path of each (`op: matmul` or `op: [copy, scale]`)."""
    at: NodePath = ("benchmarks", i, "op")
    if len(bench.op) == 1 and at + (0,) not in spec.lines:  # written as a single name
        return [(bench.op[0], at)]
    if not bench.op:
        raise SpecError(f"{spec.where(('benchmarks', i, 'op'))}: empty sweep: no op given; allowed: "
                        "an op name or a list of them")
    if len(set(bench.op)) != len(bench.op):
        raise SpecError(f"{spec.where(('benchmarks', i, 'op'))}: an op is listed twice in {bench.op}")
    return [(name, ("benchmarks", i, "op", j)) for j, name in enumerate(bench.op)]


def _plan(spec: Spec, i: int, bench: Benchmark, op_name: str, op_at: NodePath, ops: Mapping[str, Op]) -> _Plan:
    op = ops.get(op_name)
    if op is None:
        raise SpecError(f"{spec.where(op_at)}: unknown op {op_name!r}; allowed: {', '.join(sorted(ops))}")
    d = spec.defaults
    backends = _check_names(
        spec, _choose(i, "backends", bench.backends, d.backends, DEFAULT_BACKENDS), "backend", op.backends, BACKENDS,
        op_name
    )
    dtypes = _check_names(
        spec, _choose(i, "dtypes", bench.dtypes, d.dtypes, DEFAULT_DTYPES), "dtype", op.dtypes, DTYPES, op_name
    )
    cache_chosen = _choose(i, "cache", bench.cache, d.cache, DEFAULT_CACHE)
    cache = _check_names(spec, cache_chosen, "cache mode", op.cache_modes, CACHE_MODES, op_name)
    modes_chosen = _choose(i, "timing_modes", bench.timing_modes, d.timing_modes, DEFAULT_TIMING_MODES)
    modes = _check_names(spec, modes_chosen, "timing mode", op.timing_modes, TIMING_MODES, op_name)
    for c in cache:
        for m in modes:
            conflict = mode_conflict(c, m)
            if conflict:
                at = cache_chosen[1] if cache_chosen[2] else modes_chosen[1]
                raise SpecError(f"{spec.where(at)}: {conflict} (benchmark {bench.name!r}: cache {list(cache)}, "
                                f"timing_modes {list(modes)})")
    devices: tuple[str, ...] | None = None
    if bench.devices is not None or d.devices is not None:
        chosen = _choose(i, "devices", bench.devices, d.devices, ())
        devices = _check_names(spec, chosen, "device kind", DEVICE_KINDS, DEVICE_KINDS, op_name)
    tags = tuple(dict.fromkeys([*(d.tags or ()), *(bench.tags or ())]))
    timing = _timing(spec, i, bench)
    _check_pace(spec, i, bench, op, op_name, timing)
    constraint = bench.constraints.max_memory_fraction if bench.constraints else None
    if constraint is None and d.constraints is not None:
        constraint = d.constraints.max_memory_fraction
    axes = _build_axes(spec, i, bench, op, op_name)
    return _Plan(i, bench, op, backends, dtypes, cache, modes, devices, tags, timing, constraint, axes)


def _timing(spec: Spec, i: int, bench: Benchmark) -> TimingSettings:
    values: dict[str, Any] = {}
    if spec.defaults.timing is not None:
        values.update(spec.defaults.timing.values())
    if bench.timing is not None:
        values.update(bench.timing.values())
    at = ("benchmarks", i, "timing") if bench.timing is not None else ("defaults", "timing")
    try:
        return TimingSettings().override(values)
    except TimingSettingError as exc:
        raise SpecError(f"{spec.where(at)}: {exc.reason}") from None


def _check_pace(spec: Spec, i: int, bench: Benchmark, op: Op, op_name: str, timing: TimingSettings) -> None:
    """SpecError when the benchmark's pace (its own, else the defaults') is one the op does not take
    (a collective: its samples follow from its collective mode, the `mode` a spec names among its params)."""
    if op.paces is None or timing.pace in op.paces:
        return
    own = bench.timing is not None and "pace" in bench.timing.values()
    at = ("benchmarks", i, "timing", "pace") if own else ("defaults", "timing", "pace")
    raise SpecError(
        f"{spec.where(at)}: op {op_name!r} does not take pace {timing.pace!r}: a collective's samples follow "
        f"from its mode parameter (stream: calls back to back; isolated: a barrier before each call); allowed: "
        f"{', '.join(op.paces)} (give the benchmark {bench.name!r} timing: {{pace: {op.paces[0]}}})"
    )


def build_all(spec: Spec, ops: Mapping[str, Op]) -> list[_Plan]:
    names: dict[str, int] = {}
    plans = []
    for i, bench in enumerate(spec.benchmarks):
        if bench.name in names:
            raise SpecError(
                f"{spec.where(('benchmarks', i, 'name'))}: benchmark name {bench.name!r} is used twice "
                f"(also benchmarks[{names[bench.name]}]); allowed: unique names"
            )
        names[bench.name] = i
        for op_name, op_at in _op_names(spec, i, bench):
            plans.append(_plan(spec, i, bench, op_name, op_at, ops))
    total = sum(p.size for p in plans)
    if total > spec.max_cases:
        sizes: dict[str, int] = {}
        for p in plans:
            sizes[p.bench.name] = sizes.get(p.bench.name, 0) + p.size
        biggest = sorted(sizes.items(), key=lambda item: -item[1])[:3]
        shown = ", ".join(f"{name}: {size}" for name, size in biggest)
        raise SpecError(
            f"{spec.where(('max_cases',))}: the sweep has {total} cases, more than max_cases ({spec.max_cases}); "
            f"largest benchmarks: {shown}; allowed: at most max_cases cases (raise max_cases or narrow the sweep)"
        )
    return plans


def expand(spec: Spec, device_kind: str | None = None, ops: Mapping[str, Op] | None = None) -> list[Case]:
    """The spec's cases in a fixed order, without duplicates (by case_key).

    `device_kind` ("cpu" or "cuda"; "cuda:0" is read as "cuda") keeps only the benchmarks that
    run on that kind of device; None keeps all.
    """
    kind = None
    if device_kind is not None:
        try:
            kind = device_kind_of(device_kind)
        except ValueError:
            raise SpecError(f"unknown device kind {device_kind!r}; allowed: {', '.join(DEVICE_KINDS)}") from None
    cases: dict[str, Case] = {}
    for plan in build_all(spec, ops_or_registry(ops)):
        if kind is not None and plan.devices is not None and kind not in plan.devices:
            continue
        op = plan.op
        for point in sweep.product(list(plan.axes)):
            params, collective_mode = split_mode(op.family, op.resolved_params(point))
            for dtype in plan.dtypes:
                for backend in plan.backends:
                    for cache in plan.cache:
                        for mode in plan.timing_modes:
                            case = Case(
                                op=op.name,
                                op_version=op.version,
                                family=op.family,
                                backend=backend,
                                dtype=dtype,
                                cache=cache,
                                timing_mode=mode,
                                collective_mode=collective_mode,
                                params=params,
                                benchmark=plan.bench.name,
                                tags=plan.tags,
                                timing=plan.timing,
                                max_memory_fraction=plan.max_memory_fraction,
                            )
                            cases.setdefault(case.case_key, case)
    return list(cases.values())
