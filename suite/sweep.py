"""Sweep values and axes: scalars, lists, ranges, tied names and zipped groups.

Pure functions, no knowledge of ops. A value form expands to a list:
  a scalar                      -> [scalar]
  a list                        -> its items, each a scalar or a range, concatenated in order
  {start, stop, step}           -> arithmetic range, stop included when reached exactly
  {start, stop, factor}         -> geometric range (factor > 1), stop included when reached
  {pow2: [lo, hi]}              -> 2**lo, 2**(lo+1), ..., 2**hi
An axis is one or more parameter names that move together: `m=n=k: VALUES` gives all three the
same value at each step; a zip group `{seq_q: [...], seq_k: [...]}` pairs equal-length lists.
The sweep is the cartesian product of its axes.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rooflab.suite.case import ParamValue

RANGE_FORMS = "{start, stop, step} (arithmetic), {start, stop, factor} (geometric) or {pow2: [lo, hi]}"
MAX_POW2_EXPONENT = 62


class SweepError(Exception):
    """A value form is invalid; `where` is the path below the value that is wrong."""

    def __init__(self, message: str, where: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.where = where


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _tidy(value: float) -> float:
    """Remove float noise from range arithmetic (0.1 * 3 -> 0.3)."""
    return float(f"{value:.12g}")


def _number(form: Mapping[str, Any], key: str) -> int | float:
    value = form[key]
    if not _is_number(value):
        raise SweepError(f"{key} must be a number, got {value!r}", (key,))
    if isinstance(value, float) and not math.isfinite(value):
        raise SweepError(f"{key} must be finite, got {value!r}", (key,))
    return value


def _check_length(count: int, max_values: int) -> None:
    if count > max_values:
        raise SweepError(f"range has {count} values, more than the spec's max_cases ({max_values})")


def arithmetic(start: int | float, stop: int | float, step: int | float, max_values: int) -> list[int | float]:
    """start, start+step, ... up to stop (inclusive when reached); step may be negative."""
    if step == 0:
        raise SweepError("step must not be 0", ("step",))
    span = (stop - start) / step
    if span < 0:
        raise SweepError(f"empty range: step {step} never goes from {start} to {stop}", ("step",))
    count = int(math.floor(span + 1e-9)) + 1
    _check_length(count, max_values)
    if all(isinstance(v, int) for v in (start, stop, step)):
        return [start + i * step for i in range(count)]
    return [_tidy(start + i * step) for i in range(count)]


def geometric(start: int | float, stop: int | float, factor: int | float, max_values: int) -> list[int | float]:
    """start, start*factor, ... while <= stop; needs start > 0, factor > 1, stop >= start."""
    if start <= 0:
        raise SweepError(f"a geometric range needs start > 0, got {start}", ("start",))
    if factor <= 1:
        raise SweepError(f"factor must be > 1, got {factor}", ("factor",))
    if stop < start:
        raise SweepError(f"empty range: stop {stop} is below start {start}", ("stop",))
    count = int(math.floor(math.log(stop / start) / math.log(factor) + 1e-9)) + 1
    _check_length(count, max_values)
    if isinstance(start, int) and isinstance(factor, int):
        return [start * factor**i for i in range(count)]
    return [_tidy(start * factor**i) for i in range(count)]


def pow2(bounds: Any, max_values: int) -> list[int]:
    """2**lo .. 2**hi for `[lo, hi]` (integers, 0 <= lo <= hi <= 62)."""
    if (
        not isinstance(bounds, list)
        or len(bounds) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
    ):
        raise SweepError(f"pow2 takes two integer exponents [lo, hi], got {bounds!r}", ("pow2",))
    lo, hi = bounds
    if not 0 <= lo <= hi <= MAX_POW2_EXPONENT:
        raise SweepError(
            f"pow2 exponents must satisfy 0 <= lo <= hi <= {MAX_POW2_EXPONENT}, got [{lo}, {hi}]", ("pow2",)
        )
    _check_length(hi - lo + 1, max_values)
    return [2**e for e in range(lo, hi + 1)]


def _range(form: Mapping[str, Any], max_values: int) -> list[ParamValue]:
    keys = set(form)
    if keys == {"pow2"}:
        return list(pow2(form["pow2"], max_values))
    if keys == {"start", "stop", "step"}:
        return list(arithmetic(_number(form, "start"), _number(form, "stop"), _number(form, "step"), max_values))
    if keys == {"start", "stop", "factor"}:
        return list(geometric(_number(form, "start"), _number(form, "stop"), _number(form, "factor"), max_values))
    shown = ", ".join(str(k) for k in form) or "nothing"
    raise SweepError(f"unknown range form with keys {{{shown}}}; allowed: {RANGE_FORMS}")


def expand_values(raw: Any, max_values: int) -> list[ParamValue]:
    """The values one value form stands for (see the module docstring)."""
    if raw is None:
        raise SweepError("no value given; allowed: a scalar, a list or a range " + RANGE_FORMS)
    if isinstance(raw, (bool, int, float, str)):
        return [raw]
    if isinstance(raw, dict):
        return _range(raw, max_values)
    if isinstance(raw, list):
        if not raw:
            raise SweepError("empty sweep: the list has no values; allowed: at least one value")
        values: list[ParamValue] = []
        for index, item in enumerate(raw):
            if isinstance(item, list) or item is None:
                raise SweepError(f"a list item must be a scalar or a range, got {item!r}", (index,))
            try:
                values.extend(expand_values(item, max_values))
            except SweepError as exc:
                raise SweepError(exc.message, (index,) + exc.where) from None
            _check_length(len(values), max_values)
        return values
    raise SweepError(f"unsupported value {raw!r}; allowed: a scalar, a list or a range {RANGE_FORMS}")


@dataclass(frozen=True)
class Axis:
    """Parameter names that move together, and the tuple of their values at each step."""

    names: tuple[str, ...]
    rows: tuple[tuple[ParamValue, ...], ...]
    where: tuple[str | int, ...]  # path of the axis in the benchmark, for error messages


def split_tied(key: str) -> tuple[str, ...]:
    """`m=n=k` -> ("m", "n", "k"); a plain name -> (name,)."""
    names = tuple(part.strip() for part in key.split("="))
    if any(not name for name in names):
        raise SweepError(f"bad parameter name {key!r}; tie names with '=' as in m=n=k")
    if len(set(names)) != len(names):
        raise SweepError(f"{key!r} names a parameter twice")
    return names


def tied_axis(key: str, raw: Any, where: tuple[str | int, ...], max_values: int) -> Axis:
    """`m=n=k: VALUES`: every name takes the same value at each step."""
    names = split_tied(key)
    values = expand_values(raw, max_values)
    return Axis(names, tuple(tuple([v] * len(names)) for v in values), where)


def zip_axis(group: Mapping[str, Any], where: tuple[str | int, ...], max_values: int) -> Axis:
    """A zip group: names whose value lists have equal lengths and are paired index by index."""
    if not group:
        raise SweepError("empty zip group; allowed: parameters with equal-length value lists")
    names: list[str] = []
    columns: list[list[ParamValue]] = []
    for key, raw in group.items():
        try:
            key_names = split_tied(str(key))
            values = expand_values(raw, max_values)
        except SweepError as exc:
            raise SweepError(exc.message, (key,) + exc.where) from None
        for name in key_names:
            names.append(name)
            columns.append(values)
    lengths = {len(c) for c in columns}
    if len(lengths) > 1:
        shown = ", ".join(f"{n} has {len(c)}" for n, c in zip(names, columns, strict=True))
        raise SweepError(f"zipped parameters must have equal numbers of values: {shown}")
    if len(set(names)) != len(names):
        raise SweepError("a zip group names a parameter twice")
    return Axis(tuple(names), tuple(zip(*columns, strict=True)), where)


def count_points(axes: list[Axis]) -> int:
    return math.prod(len(a.rows) for a in axes)


def product(axes: list[Axis]) -> Iterator[dict[str, ParamValue]]:
    """Cartesian product of the axes, first axis outermost, as name -> value dicts."""
    for combo in itertools.product(*(a.rows for a in axes)):
        point: dict[str, ParamValue] = {}
        for axis, row in zip(axes, combo, strict=True):
            point.update(zip(axis.names, row, strict=True))
        yield point
