"""BabelStream's `--csv` output: text in, one `StreamOutput` per run (a `StreamRow` per kernel) out.

The layouts its versions print:
- `function,num_times,n_elements,sizeof,max_<unit>_per_sec,min_runtime,max_runtime,avg_runtime`, one
  line per kernel (Copy, Mul, Add, Triad, Dot, Nstream), the unit `mbytes`/`mibytes` (versions 3 and 4)
  or `MB`, `MiB`, `GB`, `GiB`, `TB`, `TiB` (version 5): the bandwidth is from the fastest run, the
  first run left out; runtimes in seconds;
- `phase,n_elements,sizeof,max_<unit>_per_sec,runtime`: the one-off Init and Read phases (some 4.x
  builds print it before the kernels' table).
Around the CSV a model may print its device: `Using CUDA device NAME` (up to 4.0), `CUDA Device 0:
"NAME" ...` (5.0), `Using HIP device NAME`, `Using OpenMP device` and so on; those lines give the
device and the implementation. BabelStream's own check names what it found wrong: `Validation
failed on a[]` (or b[], c[]; versions 3 to 5) and `FAILED validation of a[12]` (6.0), `... on sum` /
`... of sum`. An array is written by every kernel, so a wrong array makes every kernel wrong; a wrong
sum is Dot's. Several runs in one file (a batch script's loop) are read apart: a run's kernel table ends
at its first line that is not a row, and the lines after it belong to the next run. Every kernel table
must hold the kernels BabelStream prints (`check_table`), else it was cut short.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.printed import Printed, parse_printed
from rooflab.runners.peer_import.sniff import Sniff

UNITS = {"mbytes": 1e6, "mb": 1e6, "mibytes": 2.0**20, "mib": 2.0**20, "gb": 1e9, "gib": 2.0**30,
         "tb": 1e12, "tib": 2.0**40}
_BANDWIDTH = re.compile(r"^max_(\w+?)_per_sec$", re.IGNORECASE)
_DEVICE = (
    re.compile(r"^Using (\w+) device (.+?)\s*$"),  # Using CUDA device Tesla P100-SXM2-16GB
    re.compile(r"^(\w+) Device \d+:\s*\"([^\"]+)\""),  # CUDA Device 0: "NVIDIA A100-SXM4-40GB" 108 SMs ...
)
_VERSION = re.compile(r"^Version:\s*(\S+)")
_IMPLEMENTATION = re.compile(r"^Implementation:\s*(.+?)\s*$")
_CHECK_BEFORE = re.compile(r"Validation failed on (a|b|c|sum)\b", re.IGNORECASE)  # 3.x-5.0: before the run's table
_CHECK_AFTER = re.compile(r"FAILED validation of (a|b|c|sum)\b", re.IGNORECASE)  # 6.0: taken as after its table
_FUNCTION_HEADER = ("function", "num_times", "n_elements", "sizeof")
_PHASE_HEADER = ("phase", "n_elements", "sizeof")


@dataclass(frozen=True)
class StreamRow:
    """One kernel (or phase) line."""

    line: int
    function: str  # Copy, Mul, Add, Triad, Dot, Nstream; Init, Read for phases
    num_times: int | None  # None for a phase
    n_elements: int
    sizeof: int  # bytes per element
    bandwidth_bytes_per_s: Printed  # the printed max_<unit>_per_sec, in bytes/s (its rounding scaled too)
    min_s: Printed
    max_s: Printed | None
    avg_s: Printed | None
    is_phase: bool = False


@dataclass(frozen=True)
class StreamOutput:
    rows: tuple[StreamRow, ...]
    device_name: str | None
    model: str | None  # CUDA, HIP, OpenMP, ...
    version: str | None
    failed: tuple[str, ...]  # what BabelStream's own check found wrong: a, b, c (arrays), sum
    notes: tuple[str, ...] = ()  # how a figure the output does not print was read (the element count)


# the kernel tables BabelStream prints: all of them (some versions add Nstream), or Nstream alone (--nstream-only)
KERNEL_TABLES = (("copy", "mul", "add", "triad", "dot"), ("copy", "mul", "add", "triad", "dot", "nstream"),
                 ("nstream",))


def check_table(rows: Sequence[StreamRow], header_line: int) -> None:
    """A run's kernel table is whole: the kernels of one of KERNEL_TABLES in order, each with its fastest,
    average and slowest time in that order (PeerFormatError otherwise: a table or row cut short)."""
    kernels = [r for r in rows if not r.is_phase]
    names = tuple(r.function.lower() for r in kernels)
    if names not in KERNEL_TABLES:
        cut = bool(names) and any(names == t[:len(names)] for t in KERNEL_TABLES)
        last = kernels[-1].line if kernels else header_line
        printed = ", ".join(r.function for r in kernels) or "no kernel"
        raise PeerFormatError(f"the table holds {printed}; BabelStream prints Copy, Mul, Add, Triad and Dot (and "
                              "Nstream in some versions): " + ("the output is cut short after this row" if cut
                                                               else "the table is cut short or altered"), last)
    for row in kernels:
        _check_times(row)


def _check_times(row: StreamRow) -> None:
    low, high = row.min_s, row.max_s
    for name, value in (("average", row.avg_s), ("slowest", high)):
        if value is not None and value.value + value.half_ulp < low.value - low.half_ulp:
            raise PeerFormatError(f"{row.function}'s {name} time {value.value:g} s is below its fastest "
                                  f"{low.value:g} s: the row is cut short or altered", row.line)
    if row.avg_s is not None and high is not None and row.avg_s.value - row.avg_s.half_ulp > high.value + high.half_ulp:
        raise PeerFormatError(f"{row.function}'s average time {row.avg_s.value:g} s is above its slowest "
                              f"{high.value:g} s: the row is altered", row.line)


@dataclass
class Checks:
    """What BabelStream's own check printed in one stretch of a file (the lines before a run's table, or
    after the last table): the arrays and sums it found wrong, by the form of the line."""

    before: list[str] = field(default_factory=list)  # `Validation failed on a[]`: the next table's run
    after: list[str] = field(default_factory=list)  # `FAILED validation of a[12]`: the previous table's run

    def feed(self, line: str) -> bool:
        """Whether `line` is a line of the check (its names kept)."""
        before = [m.group(1).lower() for m in _CHECK_BEFORE.finditer(line)]
        after = [m.group(1).lower() for m in _CHECK_AFTER.finditer(line)]
        self.before += before
        self.after += after
        return bool(before or after)

    def own(self, outputs: list[StreamOutput], has_table: bool) -> tuple[str, ...]:
        """The names that belong to this stretch's own table; the others are added to the run read before
        it (`outputs[-1]`). A check is never dropped: with no table before, all are this table's; with no
        table after, all are the previous one's."""
        if not outputs:
            return tuple(self.before + self.after)
        back = self.after + ([] if has_table else self.before)
        if back:
            outputs[-1] = dataclasses.replace(outputs[-1], failed=outputs[-1].failed + tuple(back))
        return tuple(self.before) if has_table else ()


def kernel_failed(function: str, failed: tuple[str, ...]) -> str | None:
    """Why BabelStream's own check makes `function` wrong (None: it does not)."""
    arrays = sorted({f for f in failed if f != "sum"})
    if arrays:
        return f"BabelStream's own check failed on {', '.join(a + '[]' for a in arrays)}, which every kernel writes"
    if "sum" in failed and function.lower() == "dot":
        return "BabelStream's own check failed on Dot's sum"
    return None


def header_kind(fields: list[str]) -> str | None:
    """`function` or `phase` when `fields` are one of BabelStream's CSV headers, else None."""
    names = tuple(f.strip().lower() for f in fields)
    if names[:4] == _FUNCTION_HEADER and len(names) >= 6 and _BANDWIDTH.match(names[4]):
        return "function"
    if names[:3] == _PHASE_HEADER and len(names) >= 5 and _BANDWIDTH.match(names[3]):
        return "phase"
    return None


def _scaled(token: str, scale: float, what: str, line: int) -> Printed:
    try:
        printed = parse_printed(token.strip())
    except ValueError:
        raise PeerFormatError(f"{what} {token.strip()!r} is not a number", line) from None
    return Printed(printed.value * scale, printed.half_ulp * scale)


def _row(kind: str, header: list[str], fields: list[str], line: int) -> StreamRow:
    if len(fields) < len(header):
        raise PeerFormatError(f"{len(fields)} fields where the header has {len(header)}: the line is cut short",
                              line)
    names = [h.strip().lower() for h in header]
    values = dict(zip(names, (f.strip() for f in fields), strict=False))
    unit_name = next(n for n in names if _BANDWIDTH.match(n))
    unit = _BANDWIDTH.match(unit_name).group(1).lower()  # type: ignore[union-attr]  # the header matched it
    if unit not in UNITS:
        raise PeerFormatError(f"unknown bandwidth unit {unit!r} in {unit_name!r}", line)
    try:
        n, size = int(values["n_elements"]), int(values["sizeof"])
        num_times = int(values["num_times"]) if kind == "function" else None
    except ValueError:
        raise PeerFormatError("num_times, n_elements and sizeof must be whole numbers", line) from None
    first = "function" if kind == "function" else "phase"
    return StreamRow(
        line=line, function=values[first], num_times=num_times, n_elements=n, sizeof=size,
        bandwidth_bytes_per_s=_scaled(values[unit_name], UNITS[unit], unit_name, line),
        min_s=_scaled(values["min_runtime" if kind == "function" else "runtime"], 1.0, "runtime", line),
        max_s=_scaled(values["max_runtime"], 1.0, "max_runtime", line) if "max_runtime" in values else None,
        avg_s=_scaled(values["avg_runtime"], 1.0, "avg_runtime", line) if "avg_runtime" in values else None,
        is_phase=kind == "phase")


def context_line(line: str, found: dict[str, str]) -> None:
    """The device, model and version a line around the table names, into `found` (first one kept)."""
    for pattern in _DEVICE:
        if m := pattern.match(line):
            found.setdefault("model", m.group(1))
            found.setdefault("device", m.group(2).strip())
    if m := _VERSION.match(line):
        found.setdefault("version", m.group(1))
    if m := _IMPLEMENTATION.match(line):
        found.setdefault("model", m.group(1))


@dataclass
class _CsvRun:
    """The lines of one run of a CSV output so far."""

    rows: list[StreamRow] = field(default_factory=list)
    found: dict[str, str] = field(default_factory=dict)
    checks: Checks = field(default_factory=Checks)
    header: tuple[str, list[str], int] | None = None  # kind, fields, line

    @property
    def in_kernels(self) -> bool:
        return self.header is not None and self.header[0] == "function" and bool(self.rows)


def _csv_runs(text: str) -> list[_CsvRun]:
    runs = [_CsvRun()]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        fields = next(csv.reader(io.StringIO(line)))
        kind, run = header_kind(fields), runs[-1]
        is_row = kind is None and run.header is not None and len(fields) >= 3 and "," in line
        if run.in_kernels and not is_row:
            runs.append(run := _CsvRun())  # the kernel table ended: what follows is the next run's
        if run.checks.feed(line):
            continue  # its own check's line (6.0 writes commas in it): no row
        if kind is not None:
            run.header = (kind, fields, number)
        elif is_row and run.header is not None:
            run.rows.append(_row(run.header[0], run.header[1], fields, number))
        else:
            context_line(line, run.found)
    return runs


def parse_babelstream_csv(text: str) -> list[StreamOutput]:
    """Every run of a BabelStream `--csv` output (its kernel and phase lines, the device lines around them)."""
    outputs: list[StreamOutput] = []
    for run in _csv_runs(text):
        failed = run.checks.own(outputs, run.header is not None)
        if run.header is None:
            continue
        check_table(run.rows, run.header[2])
        outputs.append(StreamOutput(rows=tuple(run.rows), device_name=run.found.get("device"),
                                    model=run.found.get("model"), version=run.found.get("version"), failed=failed))
    if not outputs:
        raise PeerFormatError("no BabelStream CSV header (function,num_times,n_elements,sizeof,...)")
    return outputs


def looks_like_babelstream(sniff: Sniff) -> bool:
    """BabelStream's `--csv` output: one of its CSV headers within the first 200 lines."""
    for raw in sniff.text.splitlines()[:200]:
        if "," in raw and header_kind(next(csv.reader(io.StringIO(raw.strip())), [])) is not None:
            return True
    return False
