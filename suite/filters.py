"""`KEY=VALUE` filters that narrow a list of cases (`rooflab run|list --filter op=matmul`).

Keys: op, family, backend, dtype, cache, timing_mode, benchmark, tag, or any parameter name (a
collective's mode too, as a spec names it: `mode=isolated`).
Filters with the same key are OR-ed (so are comma-separated values: `dtype=float16,bfloat16`);
different keys are AND-ed. A filter that matches nothing leaves an empty list; a value that no
case could ever have (an unknown op, family, backend, dtype, cache or timing mode) is an error.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from rooflab.suite.case import BACKENDS, DTYPES, FAMILIES, Case, ParamValue
from rooflab.suite.errors import SpecError
from rooflab.suite.ops.base import Op
from rooflab.suite.ops.registry import all_ops
from rooflab.vocab import CACHE_MODES, TIMING_MODES

CASE_KEYS = ("op", "family", "backend", "dtype", "cache", "timing_mode", "benchmark", "tag")


CLOSED_VALUES: dict[str, tuple[str, ...]] = {
    "family": FAMILIES,
    "backend": BACKENDS,
    "dtype": DTYPES,
    "cache": CACHE_MODES,
    "timing_mode": TIMING_MODES,
}


def parse_filters(
    filters: Iterable[str], param_names: Iterable[str] = (), op_names: Iterable[str] | None = None
) -> dict[str, set[str]]:
    """`["op=matmul", "dtype=float16,bfloat16"]` -> {"op": {"matmul"}, "dtype": {"float16", "bfloat16"}}.

    Values of closed sets (family, backend, dtype, cache, timing_mode, and op when `op_names` is
    given) must be known ones.
    """
    allowed_params = set(param_names)
    closed = dict(CLOSED_VALUES)
    if op_names is not None:
        closed["op"] = tuple(sorted(op_names))
    parsed: dict[str, set[str]] = {}
    for text in filters:
        key, sep, value = text.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise SpecError(f"filter {text!r} is not KEY=VALUE (e.g. op=matmul)")
        if key not in CASE_KEYS and key not in allowed_params:
            params = ", ".join(sorted(allowed_params)) or "none"
            raise SpecError(
                f"filter {text!r}: unknown key {key!r}; allowed: {', '.join(CASE_KEYS)}, "
                f"or an op parameter ({params})"
            )
        values = {v.strip() for v in value.split(",") if v.strip()}
        if not values:
            raise SpecError(f"filter {text!r} has no value")
        for v in sorted(values):
            if key in closed and v not in closed[key]:
                raise SpecError(
                    f"filter {text!r}: no case can have {key} {v!r} (an unknown {key}); allowed: "
                    f"{', '.join(closed[key])}"
                )
        parsed.setdefault(key, set()).update(values)
    return parsed


def _param_matches(value: ParamValue, wanted: str) -> bool:
    if isinstance(value, bool):
        return wanted.lower() in (("true", "1", "yes") if value else ("false", "0", "no"))
    if str(value) == wanted:
        return True
    if isinstance(value, (int, float)):
        try:
            number = float(wanted)
        except ValueError:
            return False
        return math.isclose(float(value), number, rel_tol=1e-12, abs_tol=0.0)
    return False


def _matches(case: Case, key: str, wanted: set[str], ops: Mapping[str, Op]) -> bool:
    if key == "tag":
        return any(tag in wanted for tag in case.tags)
    if key in CASE_KEYS:
        return str(getattr(case, key)) in wanted
    value = case.key_params.get(key)  # a collective's mode among them, as a spec names it (`mode=isolated`)
    if value is None:  # an option left out of the case's params at its default (ParamSpec.in_key_at_default)
        op = ops.get(case.op)
        spec = op.params.get(key) if op is not None else None
        value = spec.default if spec is not None and not spec.in_key_at_default else None
    if value is None:
        return False
    return any(_param_matches(value, w) for w in wanted)


def apply_filters(cases: list[Case], filters: Iterable[str], *, ops: Mapping[str, Op] | None = None) -> list[Case]:
    """The cases matching every key (any value of a key); SpecError on a malformed or unknown key.

    Parameter keys allowed are those of the cases and of every op in `ops` (default: the registry).
    """
    filters = list(filters)
    if not filters:
        return list(cases)
    if ops is None:
        ops = all_ops()
    names = {name for case in cases for name in case.key_params}
    for op in ops.values():
        names.update(op.params)
    parsed = parse_filters(filters, names, op_names=ops.keys())
    return [c for c in cases if all(_matches(c, k, v, ops) for k, v in parsed.items())]
