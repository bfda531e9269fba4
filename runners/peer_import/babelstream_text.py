"""BabelStream's own table (its stdout without `--csv`): text in, the same `StreamOutput` as the CSV.

What versions 3.x to 5.0 print, and what is kept of it:

    BabelStream
    Version: 4.0
    Implementation: CUDA
    Running kernels 100 times
    Precision: double
    Array size: 268.4 MB (=0.3 GB)
    Total size: 805.3 MB (=0.8 GB)
    Using CUDA device NVIDIA A100-SXM4-40GB
    Function    MBytes/sec  Min (sec)   Max         Average
    Copy        1368294.603 0.00039     0.00044     0.00039
    ...

`Running kernels N times` is num_times, `Precision` the element size (float 4 B, double 8 B). The
table names no element count: a `Number of elements: N` line gives it where the version prints one;
else it is read from `Array size: X MB` (`MiB` with --mibibytes), which BabelStream prints to 0.1:
the element count is taken only when exactly one power of two lies within that rounding (BabelStream's
default, 2^25, always does), and the run says so in its notes; any other size is refused with the
reason (its `--csv` output names the count). The bandwidth column (`MBytes/sec` or `MiBytes/sec`) is
from the fastest run, as in the CSV. BabelStream's own check prints `Validation failed on a[]` (an
array every kernel writes: every kernel is wrong) or `... on sum` (Dot is wrong).
"""
from __future__ import annotations

import re

from rooflab.runners.peer_import.babelstream import (
    StreamOutput,
    StreamRow,
    checked_names,
    context_line,
)
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.printed import Printed, parse_printed

_HEADER = re.compile(r"^Function\s+(MBytes|MiBytes)/sec\s+Min \(sec\)\s+Max\s+Average\s*$")
_ROW = re.compile(r"^([A-Z][a-z]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")
_TIMES = re.compile(r"^Running (?:kernels|triad|nstream) (\d+) times")
_PRECISION = re.compile(r"^Precision:\s*(float|double)\b")
_ELEMENTS = re.compile(r"^Number of elements:\s*(\d+)\s*$")
_ARRAY = re.compile(r"^Array size:\s*(\S+)\s*(KB|KiB|MB|MiB|GB|GiB)\b")
_UNITS = {"kb": 1e3, "kib": 2.0**10, "mb": 1e6, "mib": 2.0**20, "gb": 1e9, "gib": 2.0**30}
_SIZEOF = {"float": 4, "double": 8}
KERNELS = ("Copy", "Mul", "Add", "Triad", "Dot", "Nstream")


def elements_of(array_size: Printed, unit_bytes: float, sizeof: int) -> int | None:
    """The element count an `Array size` line (printed to 0.1 of its unit) allows: the one power of
    two within its rounding, else None."""
    low = (array_size.value - array_size.half_ulp) * unit_bytes / sizeof
    high = (array_size.value + array_size.half_ulp) * unit_bytes / sizeof
    powers = [1 << k for k in range(63) if low <= (1 << k) <= high]
    return powers[0] if len(powers) == 1 else None


def looks_like_babelstream_text(text: str) -> bool:
    """Whether `text` holds BabelStream's table: its header and a `Precision:` line."""
    lines = [line.strip() for line in text.splitlines()]
    return any(_HEADER.match(line) for line in lines) and any(_PRECISION.match(line) for line in lines)


def _number(token: str, what: str, line: int, scale: float = 1.0) -> Printed:
    try:
        printed = parse_printed(token)
    except ValueError:
        raise PeerFormatError(f"{what} {token!r} is not a number", line) from None
    return Printed(printed.value * scale, printed.half_ulp * scale)


class _Reader:
    """The header lines and the table, in file order."""

    def __init__(self) -> None:
        self.found: dict[str, str] = {}
        self.failed: list[str] = []
        self.num_times: int | None = None
        self.sizeof: int | None = None
        self.elements: int | None = None
        self.array: tuple[int, Printed, float] | None = None  # line, printed size, unit bytes
        self.unit: float | None = None  # bytes per unit of the bandwidth column; None before the header
        self.rows: list[tuple[int, re.Match[str]]] = []

    def feed(self, number: int, line: str) -> None:
        self.failed.extend(checked_names(line))
        if m := _HEADER.match(line):
            self.unit = _UNITS["mib" if m.group(1) == "MiBytes" else "mb"]
        elif self.unit is not None and (m := _ROW.match(line)) and m.group(1) in KERNELS:
            self.rows.append((number, m))
        elif m := _TIMES.match(line):
            self.num_times = int(m.group(1))
        elif m := _PRECISION.match(line):
            self.sizeof = _SIZEOF[m.group(1)]
        elif m := _ELEMENTS.match(line):
            self.elements = int(m.group(1))
        elif m := _ARRAY.match(line):
            self.array = (number, _number(m.group(1), "the array size", number), _UNITS[m.group(2).lower()])
        else:
            context_line(line, self.found)

    def element_count(self) -> tuple[int, str | None]:
        """The element count and, when it was read from the array size, the note that says how."""
        if self.elements is not None:
            return self.elements, None
        if self.array is None or self.sizeof is None:
            raise PeerFormatError("BabelStream's table without its `Array size:` line: the element count is "
                                  "unknown")
        line, size, unit = self.array
        n = elements_of(size, unit, self.sizeof)
        if n is None:
            raise PeerFormatError(f"the array size {size.value:g} is printed to 0.1 and no one power of two of "
                                  f"{self.sizeof}-byte elements fits it: the element count is unknown (BabelStream's "
                                  "--csv output names it)", line)
        return n, (f"n_elements {n} (2^{n.bit_length() - 1}) read from line {line}, `Array size: {size.value:g}`: "
                   "the one power of two within its rounding")


def parse_babelstream_text(text: str) -> StreamOutput:
    """Every kernel line of BabelStream's table, with the lines around it (see the module doc)."""
    reader = _Reader()
    for number, raw in enumerate(text.splitlines(), start=1):
        if line := raw.strip():
            reader.feed(number, line)
    if reader.unit is None:
        raise PeerFormatError("no BabelStream table (Function  MBytes/sec  Min (sec)  Max  Average)")
    if reader.sizeof is None:
        raise PeerFormatError("BabelStream's table without its `Precision:` line: the element size is unknown")
    n, how = reader.element_count()
    rows = tuple(StreamRow(line=number, function=m.group(1), num_times=reader.num_times, n_elements=n,
                           sizeof=reader.sizeof, bandwidth_bytes_per_s=_number(m.group(2), "the bandwidth", number,
                                                                                reader.unit),
                           min_s=_number(m.group(3), "Min", number), max_s=_number(m.group(4), "Max", number),
                           avg_s=_number(m.group(5), "Average", number))
                 for number, m in reader.rows)
    return StreamOutput(rows=rows, device_name=reader.found.get("device"), model=reader.found.get("model"),
                        version=reader.found.get("version"), failed=tuple(reader.failed),
                        notes=(how,) if how else ())
