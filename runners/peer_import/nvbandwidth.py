"""nvbandwidth's text output (NVIDIA/nvbandwidth, stdout), parsed: its versions, its devices and each
testcase's matrices of GB/s.

The layout, as every released version (v0.1 to v0.8) prints it:

    nvbandwidth Version: v0.8
    Built from Git version: v0.8

    CUDA Runtime Version: 12080
    CUDA Driver Version: 12080
    Driver Version: 570.124.06

    gpu-node07
    Device 0: NVIDIA H100 80GB HBM3 (00000000:18:00)
    Device 1: NVIDIA H100 80GB HBM3 (00000000:2a:00)

    Running device_to_device_memcpy_write_ce.
    memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)
               0         1
     0       N/A    389.63
     1    390.02       N/A

    SUM device_to_device_memcpy_write_ce 779.65

a `Running TESTCASE.` line, then one matrix (three for a bidirectional copy between GPUs since v0.6:
each stream's, `Read1`/`Read2` or `Write1`/`Write2`, and their `Total`), each a description ending in
`bandwidth (GB/s)`, a header of column labels, one row per row label (each cell a figure with two
decimals, or `N/A`: the diagonal since v0.2, 0.00 in v0.1), a blank line and the matrix's `SUM KEY
FIGURE` (`&&&& PERF KEY FIGUREGB/s` with --perfFormatter). Device lines name no PCI id before v0.6;
v0.8 prints the node's host name on a line of its own just before them, earlier versions no host at
all; the multinode build prints `Process N (HOST): device K: NAME (PCI)` instead. Latency matrices
(`(ns)`) are not bandwidth and are skipped.

A matrix cut short is refused (PeerFormatError, exit code 2, nothing of the file stored): a matrix
between GPUs (`device_to_device_*`) with fewer rows than columns, a row with fewer cells than the
header, a matrix without its SUM line (every version prints one), a SUM its cells do not add up to, a
bidirectional testcase without all three of its matrices, or a `Total` that is not its streams' sum.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.printed import Printed, is_number, parse_printed
from rooflab.runners.peer_import.sniff import Sniff

_VERSION = re.compile(r"^nvbandwidth Version:\s*(\S+)")
_DRIVER = re.compile(r"^Driver Version:\s*(\S+)")
_CUDA = re.compile(r"^CUDA Runtime Version:\s*(\S+)")
_PCI = r"(?:\s*\(([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\))?"
_DEVICE = re.compile(rf"^Device (\d+):\s*(.+?){_PCI}\s*$")
_PROCESS = re.compile(rf"^Process\s+(\d+)\s+\((\S+)\):\s*device\s+(\d+):\s*(.+?){_PCI}\s*$")
_RUNNING = re.compile(r"^Running (?:benchmark )?(\S+?)\.\s*$")
_DESCRIPTION = re.compile(r"bandwidth \(GB/s\)\s*$")
_SUM = re.compile(r"^(?:SUM|&&&& PERF)\s+(\S+)\s+([-+0-9.eE]+)(?:GB/s)?\s*$")
NOT_AVAILABLE = "N/A"
STREAMS = {"Read1": "Read", "Read2": "Read", "Write1": "Write", "Write2": "Write", "Total": ""}
BETWEEN_GPUS = re.compile(r"^(?:multinode_)?device_to_device_(bidirectional_)?memcpy_(read|write)_(ce|sm)$")
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # v0.8's line before its device lines: the host name alone


@dataclass(frozen=True)
class NvbDevice:
    index: int  # the matrices' label: the device (single node) or the process (multinode)
    name: str
    pci: str | None  # `00000000:18:00`; None before v0.6
    host: str | None = None  # None: the output names none (a single node's output before v0.8)


@dataclass(frozen=True)
class NvbRow:
    label: str
    cells: tuple[Printed | None, ...]  # None: N/A
    line: int


@dataclass(frozen=True)
class NvbMatrix:
    """One matrix of a testcase: its name, its description (`memcpy CE GPU(row) <- GPU(column) ...`), the
    stream it holds (`Read1`, `Write2`, `Total`; None for a testcase of one matrix), its column labels,
    its rows, and its SUM."""

    testcase: str
    description: str
    stream: str | None
    line: int  # of the description
    columns: tuple[str, ...]
    rows: tuple[NvbRow, ...]
    sum_gbps: Printed
    sum_line: int

    def cell(self, row: str, column: str) -> Printed | None:
        found = next((r for r in self.rows if r.label == row), None)
        return found.cells[self.columns.index(column)] if found is not None and column in self.columns else None


@dataclass(frozen=True)
class NvbOutput:
    version: str | None
    driver_version: str | None
    cuda_version: str | None
    devices: tuple[NvbDevice, ...]
    matrices: tuple[NvbMatrix, ...]


def looks_like_nvbandwidth(sniff: Sniff) -> bool:
    """Whether the text holds an nvbandwidth matrix: a `Running TESTCASE.` line, then a line ending in
    `bandwidth (GB/s)`."""
    lines = sniff.text.splitlines()
    return any(_RUNNING.match(line.strip()) and i + 1 < len(lines) and _DESCRIPTION.search(lines[i + 1])
               for i, line in enumerate(lines))


def _device(line: str) -> NvbDevice | None:
    if (m := _DEVICE.match(line)) is not None:
        return NvbDevice(int(m.group(1)), m.group(2), m.group(3))
    if (m := _PROCESS.match(line)) is not None:
        return NvbDevice(int(m.group(1)), m.group(4), m.group(5), m.group(2))
    return None


def parse_nvbandwidth_text(text: str) -> NvbOutput:
    """nvbandwidth's stdout (see the module docstring); PeerFormatError for a matrix cut short."""
    lines = text.splitlines()
    found: dict[str, str] = {}
    devices: list[NvbDevice] = []
    matrices: list[NvbMatrix] = []
    testcase: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        for key, pattern in (("version", _VERSION), ("driver", _DRIVER), ("cuda", _CUDA)):
            if (m := pattern.match(line)) is not None:
                found.setdefault(key, m.group(1))
        if (device := _device(line)) is not None:
            if not devices and device.host is None and i > 0 and HOST_NAME.match(lines[i - 1].strip()):
                found["host"] = lines[i - 1].strip()
            devices.append(device if device.host is not None else replace(device, host=found.get("host")))
        if (running := _RUNNING.match(line)) is not None:
            testcase = running.group(1)
        elif testcase is not None and _DESCRIPTION.search(line):
            matrix, i = _matrix(lines, i, testcase)
            matrices.append(matrix)
            continue
        i += 1
    if not matrices:
        raise PeerFormatError("no testcase's matrix (a `Running TESTCASE.` line, its description and its rows)")
    _check_sums(matrices)
    _check_streams(matrices)
    return NvbOutput(found.get("version"), found.get("driver"), found.get("cuda"), tuple(devices), tuple(matrices))


def _stream(description: str) -> str | None:
    words = description.split()
    return words[-3] if len(words) >= 3 and words[-3] in STREAMS else None


def _rows(lines: list[str], start: int, testcase: str, columns: tuple[str, ...]) -> tuple[list[NvbRow], int]:
    """The rows from line index `start` to the first blank or SUM line, and the index they end at."""
    rows, i = [], start
    while i < len(lines) and lines[i].split() and not _SUM.match(lines[i].strip()):
        tokens = lines[i].split()
        cells = tokens[1:]
        if len(cells) != len(columns) or not all(c == NOT_AVAILABLE or is_number(c) for c in cells):
            raise PeerFormatError(f"{testcase}: row {tokens[0]} holds {len(cells)} cells for {len(columns)} columns "
                                  f"({' '.join(cells)!r}): the matrix is cut short or damaged", i + 1)
        rows.append(NvbRow(tokens[0], tuple(None if c == NOT_AVAILABLE else parse_printed(c) for c in cells), i + 1))
        i += 1
    return rows, i


def _matrix(lines: list[str], at: int, testcase: str) -> tuple[NvbMatrix, int]:
    """The matrix whose description is line index `at`, and the index of the line after its SUM."""
    description, header_at = lines[at].strip(), at + 1
    if header_at >= len(lines) or not lines[header_at].split():
        raise PeerFormatError(f"{testcase}: its matrix ends before its header: cut short", at + 1)
    columns = tuple(lines[header_at].split())
    rows, i = _rows(lines, header_at + 1, testcase, columns)
    if not rows:
        raise PeerFormatError(f"{testcase}: its matrix has a header and no row: cut short", header_at + 1)
    if BETWEEN_GPUS.match(testcase) and len(rows) != len(columns):
        raise PeerFormatError(f"{testcase}: {len(rows)} rows of GPUs for {len(columns)} columns: the matrix is cut "
                              "short", rows[-1].line)
    while i < len(lines) and not lines[i].strip():
        i += 1
    total = _SUM.match(lines[i].strip()) if i < len(lines) else None
    if total is None or not total.group(1).startswith(testcase):
        raise PeerFormatError(f"{testcase}: no SUM line after its matrix (every version of nvbandwidth prints one): "
                              "cut short", rows[-1].line)
    matrix = NvbMatrix(testcase, description, _stream(description), at + 1, columns, tuple(rows),
                       parse_printed(total.group(2)), i + 1)
    return matrix, i + 1


def _check_sums(matrices: list[NvbMatrix]) -> None:
    """Every matrix's SUM against its cells, within their rounding."""
    for m in matrices:
        cells = [c for r in m.rows for c in r.cells if c is not None]
        added = sum(c.value for c in cells)
        slack = sum(c.half_ulp for c in cells) + m.sum_gbps.half_ulp
        if abs(added - m.sum_gbps.value) > slack + 1e-9:
            raise PeerFormatError(f"{m.testcase}: its cells add up to {added:.2f} GB/s, its SUM line says "
                                  f"{m.sum_gbps.value:.2f}: a cell was cut or edited", m.sum_line)


def _check_streams(matrices: list[NvbMatrix]) -> None:
    """A bidirectional testcase printed in streams has both streams and their Total, each cell of the
    Total its streams' sum within their rounding."""
    by_case: dict[str, dict[str, NvbMatrix]] = {}
    for m in matrices:
        if m.stream is not None:
            by_case.setdefault(m.testcase, {})[m.stream] = m
    for testcase, streams in by_case.items():
        kind = next((STREAMS[s] for s in streams if STREAMS[s]), "Read")
        missing = [s for s in (f"{kind}1", f"{kind}2", "Total") if s not in streams]
        if missing:
            raise PeerFormatError(f"{testcase}: no {' or '.join(missing)} matrix, where it prints its two streams and "
                                  "their Total: cut short", max(m.sum_line for m in streams.values()))
        one, two, total = streams[f"{kind}1"], streams[f"{kind}2"], streams["Total"]
        for row in total.rows:
            for column, cell in zip(total.columns, row.cells, strict=True):
                parts = [one.cell(row.label, column), two.cell(row.label, column)]
                if cell is None or any(p is None for p in parts):
                    continue
                added = sum(p.value for p in parts if p is not None)
                if abs(added - cell.value) > cell.half_ulp + sum(p.half_ulp for p in parts if p is not None) + 1e-9:
                    raise PeerFormatError(f"{testcase}: row {row.label} column {column}: its Total {cell.value:.2f} "
                                          f"is not its streams' sum {added:.2f}: a cell was edited", row.line)
