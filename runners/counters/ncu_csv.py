"""Nsight Compute's CSV, raw page (`ncu --csv --page raw`), read as text: a pure function.

The raw page is one table: a header row naming the columns (`"ID"`, `"Process ID"`, ...,
`"Kernel Name"`, ..., then one column per metric, named exactly as the metric was asked for), a
second row of units (empty for the columns that are not metrics), then one row per profiled
kernel. Around it ncu may print lines of its own (`==PROF==`, `==WARNING==`, `==ERROR==`) and the
profiled program may print anything: every line before the header row and every line that starts
with `==` is skipped. Values are quoted, may carry thousands separators (`"1,234,567"`), and a
metric a kernel did not report reads `n/a` or is empty.

`parse_raw(text, metrics)` adds each metric up over the kernels (the rows are the kernels of one
NVTX range: one call of a case), converting units to base units (bytes, nanoseconds, counts; SI
prefixes K, M, G, T are powers of 1000, as ncu prints them). A metric without a column, or
without a value in any kernel, is *missing*: it has no sum, it is never zero.
"""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

ID_COLUMN = "ID"
KERNEL_COLUMN = "Kernel Name"
MISSING_VALUES = frozenset({"", "n/a", "N/A", "-"})
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_COUNT_WORDS = frozenset({"", "byte", "bytes", "inst", "cycle", "sector", "request", "warp", "thread"})
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][+-]?\d+)?$")


class NcuFormatError(ValueError):
    """The text is not a raw-page CSV that this parser can read (the message says what is wrong)."""


@dataclass(frozen=True)
class NcuReading:
    """What one NVTX range's kernels counted: each metric summed over them, in base units."""

    kernels: int
    values: dict[str, float] = field(default_factory=dict)  # metric -> sum (present metrics only)
    missing: tuple[str, ...] = ()  # asked for, but without a column or without a value in some kernel
    kernel_names: tuple[str, ...] = ()
    units: dict[str, str] = field(default_factory=dict)  # metric -> the unit as ncu printed it
    # each kernel's values, in the rows' order, base units (None: not reported by that kernel)
    per_kernel: tuple[dict[str, float | None], ...] = ()


def unit_scale(unit: str, metric: str = "") -> float:
    """The factor that turns a value in `unit` into base units (bytes, nanoseconds, counts)."""
    text = unit.strip()
    if text in _TIME:
        return _TIME[text]
    prefix, base = (text[0], text[1:]) if text[:1] in ("K", "M", "G", "T") and text[1:] in _COUNT_WORDS else ("", text)
    if base in _COUNT_WORDS:
        return _PREFIX[prefix]
    where = f" of metric {metric}" if metric else ""
    raise NcuFormatError(f"unknown unit {unit!r}{where}: expected bytes, seconds or a count, with K, M, G or T")


def parse_number(text: str) -> float | None:
    """`"1,234,567"` -> 1234567.0, `"12.5"` -> 12.5; None for a missing value (`n/a`, empty)."""
    value = text.strip()
    if value in MISSING_VALUES:
        return None
    if not _NUMBER.match(value):
        raise NcuFormatError(f"not a number: {text!r}")
    return float(value.replace(",", ""))


def has_header(text: str) -> bool:
    """Whether `text` holds a raw-page header row."""
    return any(line.lstrip().startswith(f'"{ID_COLUMN}"') for line in text.splitlines())


def _rows(text: str) -> list[list[str]]:
    """The CSV rows from the header row on, ncu's own `==` lines left out."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("==")]
    for i, line in enumerate(lines):
        if line.lstrip().startswith(f'"{ID_COLUMN}"'):
            return [row for row in csv.reader(io.StringIO("\n".join(lines[i:]))) if row]
    raise NcuFormatError(f'no header row (a CSV row starting with "{ID_COLUMN}"): was ncu run with --csv --page raw?')


def parse_raw(text: str, metrics: Sequence[str]) -> NcuReading:
    """Sum each of `metrics` over the kernel rows of a raw-page CSV (see the module doc)."""
    rows = _rows(text)
    header = rows[0]
    position = {name: i for i, name in enumerate(header)}
    body = rows[1:]
    units_row = body[0] if body and body[0] and body[0][0].strip() == "" else None
    kernels = body[1:] if units_row is not None else body
    for n, row in enumerate(kernels, start=1):
        if len(row) != len(header):
            raise NcuFormatError(f"kernel row {n} has {len(row)} cells, the header {len(header)}")
    values: dict[str, float] = {}
    missing: list[str] = []
    units: dict[str, str] = {}
    per_kernel: list[dict[str, float | None]] = [{} for _ in kernels]
    for metric in metrics:
        i = position.get(metric)
        if i is None or not kernels:
            missing.append(metric)
            continue
        unit = units_row[i] if units_row is not None else ""
        units[metric] = unit
        scale = unit_scale(unit, metric)
        cells = [parse_number(row[i]) for row in kernels]
        for kernel, cell in zip(per_kernel, cells, strict=True):
            kernel[metric] = None if cell is None else cell * scale
        if any(c is None for c in cells):
            missing.append(metric)
            continue
        values[metric] = sum(c for c in cells if c is not None) * scale
    names_at = position.get(KERNEL_COLUMN)
    names = tuple(row[names_at] for row in kernels) if names_at is not None else ()
    return NcuReading(kernels=len(kernels), values=values, missing=tuple(missing), kernel_names=names, units=units,
                      per_kernel=tuple(per_kernel))
