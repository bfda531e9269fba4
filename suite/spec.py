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

This module reads a file and words its errors; the document's structure is suite/spec_schema.py and
the expansion into cases suite/spec_expand.py (`expand` is re-exported here).
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rooflab.suite.errors import SpecError
from rooflab.suite.filters import apply_filters
from rooflab.suite.ops.base import Op
from rooflab.suite.spec_expand import DEVICE_KINDS, build_all, expand, ops_or_registry
from rooflab.suite.spec_schema import Benchmark, Constraints, Defaults, Spec, SpecDocument, TimingOverrides, where
from rooflab.suite.yaml_lines import LoadedYaml, YamlInputError, load_with_lines

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
        items.append(f"{where(spec_path, loaded.line_of(loc), loc)}: {what}")
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
        raise SpecError(f"{where(path, exc.line, exc.path)}: {exc.message}") from None
    if not isinstance(loaded.data, dict):
        got = "an empty file" if loaded.data is None else type(loaded.data).__name__
        raise SpecError(
            f"{where(path, 1, ())}: a spec is a mapping with name, benchmarks and optional "
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
    build_all(spec, ops_or_registry(ops))  # semantic validation against the ops
    return spec




