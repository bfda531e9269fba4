"""BabelStream's own table (its stdout without `--csv`): text in, one `StreamOutput` per run out.

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

`Running kernels N times` is num_times, `Precision` the element size (float 4 B, double 8 B). A file may
hold several runs one after the other (a batch script looping over sizes): each run is its header lines
and its table, read on its own (its own size, its own device and check lines). A table ends at the first
line after its rows that is not a row; a line that begins as a row and stops short, or a table that
stops before its last kernel (Dot; Nstream where the version runs it), is cut short and refused.

The table names no element count: a `Number of elements: N` line gives it where the version prints one;
else it is read from `Array size: X MB` (`MiB` with --mibibytes), which BabelStream prints to 0.1 of its
unit, so any count in that rounding fits (`element_count`): a power of two when one lies within it
(BabelStream's default, 2^25, and the sizes batch scripts sweep), else the roundest count within it (a
count typed with `-s`) as long as the rounding leaves the rates uncertain by at most 0.1 %; the run's
note says which count was taken and how far the rates could be off. The bandwidth column (`MBytes/sec`
or `MiBytes/sec`) is from the fastest run, as in the CSV. BabelStream's own check prints `Validation
failed on a[]` (an array every kernel writes: every kernel is wrong) or `... on sum` (Dot is wrong).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from rooflab.runners.peer_import.babelstream import (
    Checks,
    StreamOutput,
    StreamRow,
    check_table,
    context_line,
)
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.printed import Printed, parse_printed
from rooflab.runners.peer_import.sniff import Sniff

_HEADER = re.compile(r"^Function\s+(MBytes|MiBytes)/sec\s+Min \(sec\)\s+Max\s+Average\s*$")
_TIMES = re.compile(r"^Running (?:kernels|triad|nstream) (\d+) times")
_PRECISION = re.compile(r"^Precision:\s*(float|double)\b")
_ELEMENTS = re.compile(r"^Number of elements:\s*(\d+)\s*$")
_ARRAY = re.compile(r"^Array size:\s*(\S+)\s*(KB|KiB|MB|MiB|GB|GiB)\b")
_UNITS = {"kb": 1e3, "kib": 2.0**10, "mb": 1e6, "mib": 2.0**20, "gb": 1e9, "gib": 2.0**30}
_SIZEOF = {"float": 4, "double": 8}
KERNELS = ("Copy", "Mul", "Add", "Triad", "Dot", "Nstream")


MAX_COUNT_UNCERTAINTY = 1e-3  # a count read from the array size may leave the rates this uncertain, relatively


@dataclass(frozen=True)
class ElementCount:
    """An element count read from a printed array size, and the counts that size allows."""

    n: int
    low: int
    high: int
    power_of_two: bool

    @property
    def uncertainty(self) -> float:
        """How far, relatively, the rates could be off if the true count were another one the size allows."""
        return max(self.n - self.low, self.high - self.n) / self.n

    def describe(self, line: int, array: str) -> str:
        how = "the one power of two" if self.power_of_two else "the roundest count"
        return (f"n_elements {self.n}{f' (2^{self.n.bit_length() - 1})' if self.power_of_two else ''} read from line "
                f"{line}, `Array size: {array}`, printed to 0.1 of its unit: {how} of the {self.low} to {self.high} "
                f"it allows; a rate could be off by up to {self.uncertainty:.3%} if the count were another of them")


def _trailing_zeros(n: int) -> int:
    return len(str(n)) - len(str(n).rstrip("0"))


def element_count(array_size: Printed, unit_bytes: float, sizeof: int) -> ElementCount | None:
    """The element count an `Array size` line (printed to 0.1 of its unit) pins down (see the module
    doc), or None when it pins none closely enough."""
    low = math.ceil((array_size.value - array_size.half_ulp) * unit_bytes / sizeof)
    high = math.floor((array_size.value + array_size.half_ulp) * unit_bytes / sizeof)
    if high < max(low, 1):
        return None
    powers = [1 << k for k in range(63) if low <= (1 << k) <= high]
    if len(powers) == 1:
        return ElementCount(powers[0], low, high, power_of_two=True)
    if powers:
        return None
    middle = array_size.value * unit_bytes / sizeof
    step = 10 ** max(0, len(str(high - low)) - 1)
    candidates = range(-(-low // step) * step, high + 1, step) if step > 1 else range(low, high + 1)
    n = max(candidates, key=lambda c: (_trailing_zeros(c), -abs(c - middle)), default=round(middle))
    found = ElementCount(n, low, high, power_of_two=False)
    return found if found.uncertainty <= MAX_COUNT_UNCERTAINTY else None


def looks_like_babelstream_text(sniff: Sniff) -> bool:
    """Whether the text holds BabelStream's table: its header and a `Precision:` line."""
    lines = [line.strip() for line in sniff.text.splitlines()]
    return any(_HEADER.match(line) for line in lines) and any(_PRECISION.match(line) for line in lines)


def _number(token: str, what: str, line: int, scale: float = 1.0) -> Printed:
    try:
        printed = parse_printed(token)
    except ValueError:
        raise PeerFormatError(f"{what} {token!r} is not a number", line) from None
    return Printed(printed.value * scale, printed.half_ulp * scale)


@dataclass
class _Run:
    """The header lines and the table of one run, in file order."""

    found: dict[str, str] = field(default_factory=dict)
    checks: Checks = field(default_factory=Checks)
    num_times: int | None = None
    sizeof: int | None = None
    elements: int | None = None
    array: tuple[int, Printed, float, str] | None = None  # line, printed size, unit bytes, as printed
    header_line: int | None = None
    unit: float | None = None  # bytes per unit of the bandwidth column; None before the table's header
    rows: list[tuple[int, list[str]]] = field(default_factory=list)

    def element_count(self) -> tuple[int, str | None]:
        """The element count and, when it was read from the array size, the note that says how."""
        if self.elements is not None:
            return self.elements, None
        if self.array is None or self.sizeof is None:
            raise PeerFormatError("BabelStream's table without its `Array size:` line: the element count is "
                                  "unknown", self.header_line)
        line, size, unit, printed = self.array
        found = element_count(size, unit, self.sizeof)
        if found is None:
            raise PeerFormatError(f"the array size {printed} is printed to 0.1 and pins the count of "
                                  f"{self.sizeof}-byte elements neither to one power of two nor to within "
                                  f"{MAX_COUNT_UNCERTAINTY:.1%}: the element count is unknown (BabelStream's --csv "
                                  "output names it)", line)
        return found.n, found.describe(line, printed)


class _Reader:
    """Lines in file order into runs: a run's header lines, then its table, which ends at its first
    line that is not a row."""

    def __init__(self) -> None:
        self.runs: list[StreamOutput] = []
        self.run = _Run()

    def feed(self, number: int, line: str) -> None:
        run = self.run
        if run.unit is not None:
            if self.table_line(number, line):
                return
            self.close()
            run = self.run
        if run.checks.feed(line):
            return
        if m := _HEADER.match(line):
            run.header_line, run.unit = number, _UNITS["mib" if m.group(1) == "MiBytes" else "mb"]
        elif m := _TIMES.match(line):
            run.num_times = int(m.group(1))
        elif m := _PRECISION.match(line):
            run.sizeof = _SIZEOF[m.group(1)]
        elif m := _ELEMENTS.match(line):
            run.elements = int(m.group(1))
        elif m := _ARRAY.match(line):
            run.array = (number, _number(m.group(1), "the array size", number), _UNITS[m.group(2).lower()],
                         f"{m.group(1)} {m.group(2)}")
        else:
            context_line(line, run.found)

    def table_line(self, number: int, line: str) -> bool:
        """Whether `line` is a row of the run's table (PeerFormatError for a row cut short)."""
        tokens = line.split()
        if not tokens or tokens[0] not in KERNELS:
            return False
        if len(tokens) != 5:
            raise PeerFormatError(f"a table row of {len(tokens)} fields where BabelStream prints 5 (Function, "
                                  "MBytes/sec, Min, Max, Average): the row is cut short", number)
        self.run.rows.append((number, tokens))
        return True

    def close(self) -> None:
        """The run read so far, when it has a table, as a StreamOutput; a fresh run begins."""
        run, self.run = self.run, _Run()
        failed = run.checks.own(self.runs, run.unit is not None)
        if run.unit is None:
            return
        if run.sizeof is None:
            raise PeerFormatError("BabelStream's table without its `Precision:` line: the element size is unknown",
                                  run.header_line)
        n, how = run.element_count()
        rows = tuple(StreamRow(line=number, function=t[0], num_times=run.num_times, n_elements=n, sizeof=run.sizeof,
                               bandwidth_bytes_per_s=_number(t[1], "the bandwidth", number, run.unit),
                               min_s=_number(t[2], "Min", number), max_s=_number(t[3], "Max", number),
                               avg_s=_number(t[4], "Average", number))
                     for number, t in run.rows)
        check_table(rows, run.header_line or 0)
        self.runs.append(StreamOutput(rows=rows, device_name=run.found.get("device"), model=run.found.get("model"),
                                      version=run.found.get("version"), failed=failed,
                                      notes=(how,) if how else ()))


def parse_babelstream_text(text: str) -> list[StreamOutput]:
    """Every run of BabelStream's table in `text`, in file order (see the module doc)."""
    reader = _Reader()
    for number, raw in enumerate(text.splitlines(), start=1):
        if line := raw.strip():
            reader.feed(number, line)
    reader.close()
    if not reader.runs:
        raise PeerFormatError("no BabelStream table (Function  MBytes/sec  Min (sec)  Max  Average)")
    return reader.runs
