"""BabelStream's `--csv` output: text in, one `StreamRow` per kernel out.

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
sum is Dot's.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.printed import Printed, parse_printed

UNITS = {"mbytes": 1e6, "mb": 1e6, "mibytes": 2.0**20, "mib": 2.0**20, "gb": 1e9, "gib": 2.0**30,
         "tb": 1e12, "tib": 2.0**40}
_BANDWIDTH = re.compile(r"^max_(\w+?)_per_sec$", re.IGNORECASE)
_DEVICE = (
    re.compile(r"^Using (\w+) device (.+?)\s*$"),  # Using CUDA device Tesla P100-SXM2-16GB
    re.compile(r"^(\w+) Device \d+:\s*\"([^\"]+)\""),  # CUDA Device 0: "NVIDIA A100-SXM4-40GB" 108 SMs ...
)
_VERSION = re.compile(r"^Version:\s*(\S+)")
_IMPLEMENTATION = re.compile(r"^Implementation:\s*(.+?)\s*$")
_CHECK_FAILED = re.compile(r"(?:Validation failed on|FAILED validation of) (a|b|c|sum)\b", re.IGNORECASE)
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


def checked_names(line: str) -> list[str]:
    """What a line of BabelStream's own check says is wrong: `a`, `b`, `c` (arrays) or `sum`."""
    return [m.group(1).lower() for m in _CHECK_FAILED.finditer(line)]


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


def parse_babelstream_csv(text: str) -> StreamOutput:
    """Every kernel and phase line of a BabelStream `--csv` output, with the device lines around it."""
    rows: list[StreamRow] = []
    found: dict[str, str] = {}
    failed: list[str] = []
    header: tuple[str, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        checked = checked_names(line)
        failed.extend(checked)
        fields = next(csv.reader(io.StringIO(line)))
        kind = header_kind(fields)
        if checked:
            continue  # its own check's line (6.0 writes commas in it): no row
        if kind is not None:
            header = (kind, fields)
        elif header is not None and len(fields) >= 3 and "," in line:
            rows.append(_row(header[0], header[1], fields, number))
        else:
            context_line(line, found)
    if header is None:
        raise PeerFormatError("no BabelStream CSV header (function,num_times,n_elements,sizeof,...)")
    return StreamOutput(rows=tuple(rows), device_name=found.get("device"), model=found.get("model"),
                        version=found.get("version"), failed=tuple(failed))


def looks_like_babelstream(text: str) -> bool:
    for raw in text.splitlines()[:200]:
        if "," in raw and header_kind(next(csv.reader(io.StringIO(raw.strip())), [])) is not None:
            return True
    return False
