"""nccl-tests output written with nccl-tests' own printf formats (src/util.cu and src/common.cu of
2.17-2.19; the 2017-2021 formats for the old layout), for the variants no committed real output shows
(-C, -S, -I, the `error` column, a row split by NCCL INFO noise, several tests in one file). Every
figure is computed from a chosen time exactly as nccl-tests computes it (GetBw), then printed as it
prints it (getFloatStr), so the importer is tested against the tool's arithmetic and layout, not
against numbers typed by hand. nvbandwidth's stdout likewise (nvb_output, nvb_matrix: its output.cpp
and its matrix printer), from cells chosen by the caller. Not a test module (no `test_` prefix)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tests.runners.peer_import.planting import float_str

FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0, "sendrecv": lambda n: 1.0}
SIZE_RANKS = ("all_gather", "reduce_scatter", "alltoall")


@dataclass(frozen=True)
class Rank:
    host: str
    device: int
    bus: str = "0000:06:00"
    gpu: str = "NVIDIA H100 80GB HBM3"


def devices(ranks: Sequence[Rank], *, old: bool = False) -> list[str]:
    lines = ["# Using devices"]
    for r, d in enumerate(ranks):
        if old:  # 2021: no Group, a one-byte bus id
            lines.append(f"#   Rank {r:2d} Pid {1000 + r:6d} on {d.host:>10s} device {d.device:2d} [0x{r:02x}] {d.gpu}")
        else:
            lines.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {d.host:>10s} device {d.device:2d} [{d.bus}] "
                         f"{d.gpu}")
    return lines


def header(program: str, min_bytes: int, max_bytes: int, *, iters: int = 20, version: str | None = "2.18.3",
           per_iteration: bool = False) -> list[str]:
    lines = []
    if version:
        lines += [f"# nccl-tests version {version} nccl-headers=22807 nccl-library=22807",
                  f"# Collective test starting: {program}"]
    lines.append(f"# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: 2(factor) warmup iters: 1 "
                 f"iters: {iters} agg iters: 1 validation: 1 graph: 0 unalign: 0")
    if per_iteration:
        lines.append("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows ")
    lines.append("#")
    return lines


def columns(*, time: str = "time", timestamp: bool = False, per_iteration: bool = False) -> list[str]:
    half = [time, "algbw", "busbw", "#wrong"] + (["i_min", "i_max", "i_p99", "i_cv%"] if per_iteration else [])
    names = ["size", "count", "type", "redop", "root", *half, *half] + (["timestamp"] if timestamp else [])
    return ["#", "#                                                              out-of-place"
            "                       in-place          ", "# " + "  ".join(f"{n:>7s}" for n in names),
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  "
            "(GB/s)  (GB/s)         "]


@dataclass(frozen=True)
class Half:
    time_us: float
    wrong: str = "0"
    per_iteration: tuple[float, float, float, float] | None = None  # i_min, i_max, i_p99 (us), i_cv%

    def text(self, op: str, size: int, ranks: int) -> tuple[str, float]:
        """The half as nccl-tests prints it, and its busbw as printed."""
        algbw = size / 1e9 / (self.time_us * 1e-6)
        busbw = algbw * FACTORS[op](ranks)
        wrong = f"{float(self.wrong):6g}" if self.wrong != "N/A" else "   N/A"
        text = f"  {float_str(self.time_us, 7)}  {float_str(algbw, 6)}  {float_str(busbw, 6)}  {wrong}"
        if self.per_iteration:
            text += "".join(f"  {float_str(v, 7)}" for v in self.per_iteration)
        return text, float(float_str(busbw, 6))


def rows(op: str, dtype: str, esize: int, ranks: int, sizes: Sequence[int], halves: Sequence[tuple[Half, Half]], *,
         redop: str = "sum", root: int = -1, stamps: Sequence[str] = ()) -> tuple[list[str], list[float]]:
    """Table rows (and every printed busbw, for the footer's average)."""
    lines, busbws = [], []
    for i, (size, (oop, ip)) in enumerate(zip(sizes, halves, strict=True)):
        count = size // esize // (ranks if op in SIZE_RANKS else 1)
        texts = [oop.text(op, size, ranks), ip.text(op, size, ranks)]
        busbws += [b for _, b in texts]
        stamp = f"{stamps[i]:>21s}" if stamps else ""
        lines.append(f"{size:12d}  {count:12d}  {dtype:>8s}  {redop:>6s}  {root:6d}{texts[0][0]}{texts[1][0]}{stamp}")
    return lines, busbws


def footer(program: str, busbws: Sequence[float], *, failed: int = 0) -> list[str]:
    average = sum(busbws) / len(busbws)
    return [f"# {'Out of bounds values':<20s} : {failed} {'FAILED' if failed else 'OK'}",
            f"# {'Avg bus bandwidth':<20s} : {average:g} ", "#", f"# Collective test concluded: {program}", "#"]


def all_reduce_test(hosts: Sequence[str] = ("node-a", "node-b"), *, slow: float = 1.0, sizes: Sequence[int] = (),
                    program: str = "all_reduce_perf") -> str:
    """A whole all_reduce_perf output over `hosts` (one GPU each), its times of 1 MiB and up
    multiplied by `slow`."""
    sizes = sizes or [1 << k for k in range(10, 28)]
    ranks = len(hosts)
    base = [20.0 + s / 20e3 for s in sizes]  # 20 us, then about 20 GB/s
    halves = [(Half(t * (slow if s >= 1 << 20 else 1.0)), Half(t * 1.01 * (slow if s >= 1 << 20 else 1.0)))
              for s, t in zip(sizes, base, strict=True)]
    table, busbws = rows("all_reduce", "float", 4, ranks, sizes, halves)
    lines = [*header(program, sizes[0], sizes[-1]), *devices([Rank(h, 0) for h in hosts]), *columns(), *table,
             *footer(program, busbws)]
    return "\n".join(lines) + "\n"


def old_table(op: str, ranks: int, sizes: Sequence[int], times_us: Sequence[tuple[float, float]], *,
              redop: str | None, root: bool = False, gpu: str = "A100-SXM4-40GB", noise_after: int = -1) -> str:
    """A whole output in the 2020 layout (nccl-tests 2.0 with validation off): the short header, the device
    lines without Group, each test's own leading columns (`size count type`, then `redop` when `redop` is
    not None, where "" leaves every row blank as 2020's alltoall did, then `root` when `root`), the `error`
    column, `N/A` in it, and an NCCL INFO line after the row `noise_after` (-1: none)."""
    lines = [*header(f"{op}_perf", sizes[0], sizes[-1], version=None),
             *devices([Rank("localhost", r, gpu=gpu) for r in range(ranks)], old=True)]
    names = ["size", "count", "type"] + (["redop"] if redop is not None else []) + (["root"] if root else [])
    half = ["time", "algbw", "busbw", "error"]
    lines += ["#", "#  " + "  ".join(f"{n:>10s}" for n in names + half + half)]
    busbws = []
    for i, (size, times) in enumerate(zip(sizes, times_us, strict=True)):
        count = size // 4 // (ranks if op in SIZE_RANKS else 1)
        row = f"{size:12d}  {count:12d}  {'float':>6s}" + (f"  {redop:>6s}" if redop is not None else "")
        row += f"  {0:6d}" if root else ""
        for t in times:
            algbw = size / 1e9 / (t * 1e-6)
            busbw = algbw * FACTORS[op](ranks)
            busbws.append(float(float_str(busbw, 6)))
            row += f"  {float_str(t, 7)}  {algbw:6.2f}  {float_str(busbw, 6)}  {'N/A':>5s}"
        lines.append(row)
        if i == noise_after:
            lines.append("hostname:3442:3442 [0] NCCL INFO Launch mode Parallel")
    average = sum(busbws) / len(busbws)
    lines += [f"# {'Out of bounds values':<20s} : 0 OK", f"# {'Avg bus bandwidth':<20s} : {average:g} ", "#"]
    return "\n".join(lines) + "\n"


STREAM_ARRAYS = {"Copy": 2, "Mul": 2, "Add": 3, "Triad": 3, "Dot": 2}


def babelstream_run(n: int, fastest_s: dict[str, float], *, sizeof: int = 8, version: str = "3.4",
                    device: str = "NVIDIA A100-SXM4-40GB", checks: Sequence[str] = ()) -> list[str]:
    """One run of BabelStream 3.4's own table as its main.cpp prints it: the header lines (the array size
    in MB to one decimal), `checks` (its validation lines, printed before the table), then each kernel's
    bandwidth from its fastest time (three decimals) and its fastest, slowest and average times (five)."""
    precision = "double" if sizeof == 8 else "float"
    lines = ["BabelStream", f"Version: {version}", "Implementation: CUDA", "Running kernels 100 times",
             f"Precision: {precision}", f"Array size: {n * sizeof * 1e-6:.1f} MB (={n * sizeof * 1e-9:.1f} GB)",
             f"Total size: {3 * n * sizeof * 1e-6:.1f} MB (={3 * n * sizeof * 1e-9:.1f} GB)",
             f"Using CUDA device {device}", "Driver: 11000", *checks,
             f"{'Function':<12s}{'MBytes/sec':<12s}{'Min (sec)':<12s}{'Max':<12s}{'Average':<12s}"]
    for kernel, fastest in fastest_s.items():
        bandwidth = 1e-6 * STREAM_ARRAYS[kernel] * sizeof * n / fastest
        lines.append(f"{kernel:<12s}{bandwidth:<12.3f}{fastest:<12.5f}{fastest * 1.04:<12.5f}{fastest * 1.01:<12.5f}")
    return lines


def stream_times(n: int, gbps: float, sizeof: int = 8) -> dict[str, float]:
    """Each kernel's fastest time (s) at about `gbps` GB/s (Dot a little slower)."""
    return {k: STREAM_ARRAYS[k] * sizeof * n / (gbps * (0.93 if k == "Dot" else 1.0) * 1e9) for k in STREAM_ARRAYS}


NVB_NOTE = ["NOTE: This tool reports current measured bandwidth on your system.",
            "Additional system-specific tuning may be required to achieve maximal peak bandwidth.", ""]


def nvb_matrix(key: str, description: str, values: Sequence[Sequence[float | None]]) -> list[str]:
    """One matrix as nvbandwidth v0.5-v0.8 prints it (its PeerValueMatrix operator<<): the description, a
    header of column labels (two spaces, then each label in 10 columns), each row's label in 2 and its
    cells in 10 (two decimals, `N/A` where none), a blank line, `SUM KEY` with the sum of the unrounded
    cells, then the blank line addTestcaseResults ends with."""
    header = "  " + "".join(f"{c:>10d}" for c in range(len(values[0])))
    rows = [f"{r:>2d}" + "".join(f"{v:>10.2f}" if v is not None else f"{'N/A':>10s}" for v in row)
            for r, row in enumerate(values)]
    total = sum(v for row in values for v in row if v is not None)
    return [description, header, *rows, "", f"SUM {key} {total:.2f}", ""]


def nvb_output(gpus: Sequence[tuple[str, str | None]], testcases: Sequence[tuple[str, list[str]]], *,
               version: str = "v0.8", hosts: Sequence[str] = (), host: str | None = None) -> str:
    """A whole nvbandwidth stdout: the version and driver lines, `host` on a line of its own (v0.8's host
    name; None: none, as before v0.8), a `Device N: NAME (PCI)` line for each of
    `gpus` (name, PCI id; None: the line before v0.6, without it), or with `hosts` the multinode build's
    `Process N (HOST): device K: NAME (PCI)` lines (one GPU per process, K counting on each host), then
    each testcase's `Running KEY.` line and its matrices (nvb_matrix), and the closing note, in the order
    its main() prints them."""
    lines = [f"nvbandwidth Version: {version}", f"Built from Git version: {version}", "",
             "CUDA Runtime Version: 12080", "CUDA Driver Version: 12080", "Driver Version: 570.124.06", ""]
    named = [f"{name} ({pci})" if pci else name for name, pci in gpus]
    if hosts:
        width = len(str(len(hosts) - 1))
        lines += [f"Process {i:>{width}d} ({host}): device {hosts[:i].count(host)}: {text}"
                  for i, (host, text) in enumerate(zip(hosts, named, strict=True))]
    else:
        lines += [*([host] if host else []), *(f"Device {i}: {text}" for i, text in enumerate(named))]
    lines.append("")
    for key, matrices in testcases:
        lines += [f"Running {key}.", *matrices]
    return "\n".join([*lines, *NVB_NOTE])


def nvb_pairs(size: int, rate: float, *, slow: tuple[int, int] | None = None, factor: float = 1.0,
              spread: float = 0.0017) -> list[list[float | None]]:
    """A matrix between `size` GPUs: `rate` GB/s in each cell, each a little off it (`spread`, by its
    place), the cells of the pair `slow` (both ways) times `factor`, the diagonal N/A."""
    cells: list[list[float | None]] = []
    for i in range(size):
        row: list[float | None] = []
        for j in range(size):
            wobble = 1 + spread * (((7 * i + 3 * j) % 5) - 2) / 2
            row.append(None if i == j else rate * wobble * (factor if slow and {i, j} == set(slow) else 1.0))
        cells.append(row)
    return cells
