"""Benchmark specs: declarative YAML, validated before anything runs, expanded into `Case`s.

A spec file::

    name: example                     # required: letters, digits, _ . -
    description: what this spec is for
    max_cases: 5000                   # the sweep may not be larger (default 5000; counted over all
                                      # benchmarks, before the device filter and duplicate removal)
    defaults:                         # optional; applied to every benchmark that does not set them
      backends: [eager]               # default [eager]
      dtypes: [float32]               # default [float32]
      cache: [cold]                   # cold and/or hot; default [cold]
      timing_modes: [launch]          # launch and/or graph; default [launch]
      devices: [cpu, cuda]            # device kinds the benchmarks run on; default: all
      tags: [example]                 # added to every benchmark's own tags
      timing: {max_time_ms: 500}      # fields of suite.timing.TimingSettings, e.g. also
                                      # flush_method: write_sweep | read_sweep (cold cases; default
                                      # write_sweep) and pace: back_to_back | idle (default back_to_back)
      constraints: {max_memory_fraction: 0.5}
    benchmarks:
      - name: gemm_square             # required, unique in the spec
        op: matmul                    # required: an op of suite.ops.registry, or a list of ops
                                      # sharing this sweep, e.g. [stream_copy, stream_triad]
        dtypes: [float16, bfloat16]   # a single string is a one-item list
        backends: eager
        cache: [cold, hot]
        timing_modes: [launch]
        devices: [cuda]               # only on CUDA devices (a spec may hold CPU- and GPU-sized sweeps)
        tags: [gemm]
        timing: {min_samples: 20, max_time_ms: 1000}   # over the defaults' timing, field by field
        constraints: {max_memory_fraction: 0.8}        # a bigger case is recorded as skipped
        params:
          m=n=k: {pow2: [8, 14]}      # tied: m, n and k take the same value, 256 .. 16384
          batch: [1, 8]               # a list
      - name: attention_lengths
        op: attention
        dtypes: bfloat16
        params:
          causal: [false, true]
          kernel: sdpa_flash          # a scalar
        zip:                          # groups of parameters that move together
          - {seq_q=seq_k: [1024, 4096, 16384], batch: [16, 4, 1]}

Parameter values: a scalar; a list (items are scalars or ranges, concatenated); an arithmetic range
`{start: 128, stop: 1024, step: 128}` (stop included when reached); a geometric range
`{start: 1, stop: 1024, factor: 4}`; powers of two `{pow2: [10, 20]}` (2**10 .. 2**20). A key
`a=b` ties parameters to one shared sweep; each `zip` group pairs equal-length lists index by index.
Values are checked against the op's parameters (type, choices, sizes > 0); parameters left out
take the op's defaults. The sweep of a benchmark is the product of its ops, parameter axes, zip
groups, dtypes, backends, cache modes and timing modes. Cases are ordered by benchmark, op,
parameter point (first axis outermost), dtype, backend, cache mode and timing mode; a case whose
`case_key` already appeared earlier in the spec is dropped.

Every error is a `SpecError` naming the file, the line, the field path (`benchmarks[2].params.n`),
what is wrong and what is allowed.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, create_model, field_validator

from rooflab.suite import sweep
from rooflab.suite.case import BACKENDS, DTYPES, Case, mode_conflict
from rooflab.suite.errors import SpecError
from rooflab.suite.filters import apply_filters
from rooflab.suite.ops.base import Op, ParamValueError
from rooflab.suite.timing import CHOICE_SETTINGS, TimingSettingError, TimingSettings, check_timing_value
from rooflab.suite.yaml_lines import LoadedYaml, NodePath, YamlInputError, format_path, load_with_lines
from rooflab.vocab import CACHE_MODES, TIMING_MODES, CacheMode, DeviceKind, TimingMode

__all__ = [
    "Benchmark",
    "Defaults",
    "Spec",
    "SPECS_DIR",
    "DEVICE_KINDS",
    "apply_filters",
    "expand",
    "load_spec",
    "parse_spec",
    "resolve_spec_path",
]

SPECS_DIR = Path(__file__).parent / "specs"
DEVICE_KINDS = tuple(DeviceKind)
DEFAULT_MAX_CASES = 5000
DEFAULT_BACKENDS = ("eager",)
DEFAULT_DTYPES = ("float32",)
DEFAULT_CACHE = (CacheMode.COLD,)
DEFAULT_TIMING_MODES = (TimingMode.LAUNCH,)


# ---------------------------------------------------------------- document models (structure only)


def _as_list(value: Any) -> Any:
    """A single string stands for a one-item list."""
    return [value] if isinstance(value, str) else value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _TimingOverridesBase(_Model):
    """Overrides of suite.timing.TimingSettings; a field left out keeps the value below it."""

    @field_validator("*", mode="before")
    @classmethod
    def _in_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        # the bounds are suite.timing's (one statement for the spec, the CLI and the API); what is not
        # a number is left to the type check ("expected a number"), except where a name is expected
        named = str(info.field_name) in CHOICE_SETTINGS
        if not named and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return value
        if named and not isinstance(value, str):
            return value
        try:
            return check_timing_value(str(info.field_name), value)
        except TimingSettingError as exc:
            raise ValueError(exc.reason) from None

    def values(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


if TYPE_CHECKING:
    TimingOverrides = _TimingOverridesBase
else:
    # one field per timing setting, made from its declaration in suite.timing. Any number is taken
    # here (an int is one too): whether one must be whole is the bounds' rule, so that a spec, a CLI
    # flag and the API refuse 2.5 samples with the same message
    TimingOverrides = create_model(
        "TimingOverrides", __base__=_TimingOverridesBase,
        **{name: (str | None if name in CHOICE_SETTINGS else float | None, None) for name in TimingSettings.names()},
    )


class Constraints(_Model):
    # a case whose op.memory_bytes exceeds this fraction of device memory is recorded as skipped
    max_memory_fraction: float | None = Field(None, gt=0, le=1)


class _Common(_Model):
    backends: list[str] | None = None
    dtypes: list[str] | None = None
    cache: list[str] | None = None
    timing_modes: list[str] | None = None
    devices: list[str] | None = None
    tags: list[str] | None = None
    timing: TimingOverrides | None = None
    constraints: Constraints | None = None

    _listify = field_validator("backends", "dtypes", "cache", "timing_modes", "devices", "tags", mode="before")(
        _as_list
    )


class Defaults(_Common):
    """Settings applied to every benchmark of the spec that does not set them itself."""


class Benchmark(_Common):
    """One entry of `benchmarks`: an op and the sweep to run it over."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    op: list[str]  # one op (a string), or several sharing the sweep (e.g. the five streams)
    description: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    zip: list[dict[str, Any]] = Field(default_factory=list)

    _op_list = field_validator("op", mode="before")(_as_list)


class SpecDocument(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    max_cases: int = Field(DEFAULT_MAX_CASES, ge=1)
    defaults: Defaults = Field(default_factory=Defaults)
    benchmarks: list[Benchmark] = Field(min_length=1)


# ---------------------------------------------------------------- the loaded spec


@dataclass(frozen=True, eq=False)
class Spec:
    """A validated spec file: its document, where it came from and its exact text."""

    name: str
    description: str
    path: Path
    text: str
    sha256: str
    max_cases: int
    defaults: Defaults
    benchmarks: tuple[Benchmark, ...]
    lines: Mapping[NodePath, int] = field(default_factory=dict, repr=False)

    def where(self, path: NodePath) -> str:
        """`file, line N, field.path` for an error message."""
        return _where(self.path, LoadedYaml(None, dict(self.lines)).line_of(path), path)


def _where(path: Path | str, line: int | None, node_path: NodePath) -> str:
    parts = [str(path)]
    if line is not None:
        parts.append(f"line {line}")
    if node_path:
        parts.append(format_path(node_path))
    return ", ".join(parts)


def _field_names(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose field list explains an error at `loc` (for 'unknown field')."""
    if not loc:
        return SpecDocument
    head = loc[0]
    if head == "defaults":
        inner: type[BaseModel] = Defaults
        rest = loc[1:]
    elif head == "benchmarks" and len(loc) >= 2:
        inner = Benchmark
        rest = loc[2:]
    else:
        return None
    if not rest:
        return inner
    if rest[0] == "timing" and len(rest) == 1:
        return TimingOverrides
    if rest[0] == "constraints" and len(rest) == 1:
        return Constraints
    return None


_NAME_LISTS = ("op", "backends", "dtypes", "cache", "timing_modes", "devices", "tags")
_EXPECTED = {
    "dict_type": "a mapping (key: value)",
    "model_type": "a mapping (key: value)",
    "model_attributes_type": "a mapping (key: value)",
    "list_type": "a list",
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
}


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _pydantic_message(exc: ValidationError, spec_path: Path | str, loaded: LoadedYaml) -> str:
    """One readable message from Pydantic's errors (at most three listed)."""
    items = []
    errors = exc.errors(include_url=False)
    for err in errors[:3]:
        loc = tuple(err["loc"])
        kind = err["type"]
        if loc and loc[-1] == "[key]":  # a mapping key of the wrong type
            loc = loc[:-1]
            what = f"wrong type: a key must be a string, got {_shown(err.get('input'))}"
        elif kind == "list_type" and loc and loc[-1] in _NAME_LISTS:
            what = f"wrong type: expected a name or a list of names, got {_shown(err.get('input'))}"
        elif kind == "extra_forbidden":
            parent = _model_at(loc[:-1])
            allowed = f"; allowed: {_field_names(parent)}" if parent else ""
            what = f"unknown field {loc[-1]!r}{allowed}"
        elif kind == "missing":
            what = "required field missing"
        elif kind == "string_pattern_mismatch":
            what = f"{err['input']!r} is not a valid name; allowed: letters, digits, '_', '.', '-'"
        elif kind == "too_short" and loc == ("benchmarks",):
            what = "empty sweep: the spec has no benchmarks; allowed: a list of at least one benchmark"
        elif kind == "value_error":  # a validator of ours: its message says what is allowed
            what = str(err["ctx"]["error"])
        elif kind in _EXPECTED:
            what = f"wrong type: expected {_EXPECTED[kind]}, got {_shown(err.get('input'))}"
        else:
            msg = err["msg"]
            what = f"{msg[0].lower()}{msg[1:]}, got {_shown(err.get('input'))}"
        items.append(f"{_where(spec_path, loaded.line_of(loc), loc)}: {what}")
    more = len(errors) - len(items)
    if more > 0:
        items.append(f"(and {more} more error{'s' if more > 1 else ''})")
    return items[0] if len(items) == 1 else "invalid spec:\n  " + "\n  ".join(items)


def resolve_spec_path(path: str | Path) -> Path:
    """`path` itself, or a shipped spec by name (`quick` -> suite/specs/quick.yaml)."""
    candidate = Path(path)
    if candidate.exists():
        return candidate
    shipped = SPECS_DIR / f"{path}.yaml"
    if candidate.suffix == "" and shipped.exists():
        return shipped
    names = ", ".join(sorted(p.stem for p in SPECS_DIR.glob("*.yaml")))
    raise SpecError(f"{path}: spec file not found; allowed: a path to a YAML file or a shipped spec ({names})")


def load_spec(path: str | Path, *, ops: Mapping[str, Op] | None = None) -> Spec:
    """Read, parse and validate a spec file (structure and ops); raise SpecError if anything is wrong."""
    resolved = resolve_spec_path(path)
    try:
        text = resolved.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{resolved}: cannot read the spec: {exc}") from None
    return parse_spec(text, resolved, ops=ops)


def parse_spec(text: str, path: str | Path = "<spec>", *, ops: Mapping[str, Op] | None = None) -> Spec:
    """Validate spec text as `load_spec` does; `path` only names it in messages."""
    try:
        loaded = load_with_lines(text)
    except YamlInputError as exc:
        raise SpecError(f"{_where(path, exc.line, exc.path)}: {exc.message}") from None
    if not isinstance(loaded.data, dict):
        got = "an empty file" if loaded.data is None else type(loaded.data).__name__
        raise SpecError(
            f"{_where(path, 1, ())}: a spec is a mapping with name, benchmarks and optional "
            f"description, max_cases, defaults; got {got}"
        )
    try:
        doc = SpecDocument.model_validate(loaded.data)
    except ValidationError as exc:
        raise SpecError(_pydantic_message(exc, path, loaded)) from None
    spec = Spec(
        name=doc.name,
        description=doc.description,
        path=Path(path),
        text=text,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        max_cases=doc.max_cases,
        defaults=doc.defaults,
        benchmarks=tuple(doc.benchmarks),
        lines=loaded.lines,
    )
    _build_all(spec, _ops_or_registry(ops))  # semantic validation against the ops
    return spec


# ---------------------------------------------------------------- validation and expansion


def _ops_or_registry(ops: Mapping[str, Op] | None) -> Mapping[str, Op]:
    if ops is not None:
        return ops
    from rooflab.suite.ops.registry import all_ops

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


def _build_all(spec: Spec, ops: Mapping[str, Op]) -> list[_Plan]:
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
        kind = device_kind.split(":", 1)[0]
        if kind not in DEVICE_KINDS:
            raise SpecError(f"unknown device kind {device_kind!r}; allowed: {', '.join(DEVICE_KINDS)}")
    cases: dict[str, Case] = {}
    for plan in _build_all(spec, _ops_or_registry(ops)):
        if kind is not None and plan.devices is not None and kind not in plan.devices:
            continue
        op = plan.op
        for point in sweep.product(list(plan.axes)):
            params = op.resolved_params(point)
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
                                params=dict(params),
                                benchmark=plan.bench.name,
                                tags=plan.tags,
                                timing=plan.timing,
                                max_memory_fraction=plan.max_memory_fraction,
                            )
                            cases.setdefault(case.case_key, case)
    return list(cases.values())
