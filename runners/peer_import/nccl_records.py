"""The typed records of an nccl-tests (or rccl-tests) output, whichever form it came in: stdout
(nccl_tests) or `-J` JSON (nccl_json). One `NcclRow` per printed row (one message size), with its
out-of-place and in-place halves; one `NcclTest` per test run (one binary's table)."""
from __future__ import annotations

from dataclasses import dataclass, field

from rooflab.runners.peer_import.printed import Printed


@dataclass(frozen=True)
class RankDevice:
    """One `#  Rank ...` line: where a rank ran."""

    rank: int
    host: str
    device: int  # the CUDA (HIP) device index on its host
    bus_id: str  # as printed: `0000:06:00`, or `0x06` in older versions
    gpu_name: str
    pid: int | None = None
    group: int | None = None


@dataclass(frozen=True)
class IterationStats:
    """`-I 1`: the per-iteration CUDA-event times of one half (microseconds)."""

    min_us: Printed | None = None
    max_us: Printed | None = None
    p99_us: Printed | None = None
    cv_pct: Printed | None = None
    times_us: tuple[float, ...] = ()  # every iteration's time (JSON only)
    per_process_times_us: tuple[tuple[float, ...], ...] = ()  # JSON: each process's own times


@dataclass(frozen=True)
class NcclHalf:
    """One half of a row (out-of-place or in-place): the time per operation and the bandwidths."""

    time_us: Printed
    algbw_gbps: Printed
    busbw_gbps: Printed
    wrong: float | None  # elements found wrong; None when not checked (N/A)
    wrong_is_delta: bool = False  # versions before 2.12 print the largest error (`error`), not a count
    per_iteration: IterationStats | None = None


@dataclass(frozen=True)
class NcclRow:
    """One printed row: a message size of one test."""

    line: int  # where the row starts in the file (1-based)
    size_bytes: int  # the operation's size as nccl-tests counts it
    count: int  # elements per rank (nccl-tests' count)
    dtype: str  # as printed: float, half, bfloat16, ...
    redop: str | None  # sum, prod, ..., or none; None when the version prints no redop column
    root: int | None  # -1 where it does not apply; None when no root column
    out_of_place: NcclHalf | None
    in_place: NcclHalf | None
    timestamp: str | None = None  # `-S 1`: local time of the row, as printed


@dataclass(frozen=True)
class RunSettings:
    """The `# nThread ...` line (or the JSON config): how the test was run."""

    nthreads: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    agg_iters: int | None = None
    validation: int | None = None
    graph: int | None = None


@dataclass(frozen=True)
class NcclTest:
    """One test run: one binary's header, devices, table and footer."""

    tool: str  # a vocab.Tool value: nccl-tests or rccl-tests
    first_line: int
    last_line: int
    program: str | None  # all_reduce_perf, ...; None when the output never names it
    tool_version: str | None
    library_version: str | None  # NCCL's (RCCL's) version, e.g. 2.26.2
    settings: RunSettings
    devices: tuple[RankDevice, ...]
    rows: tuple[NcclRow, ...]
    time_is_cputime: bool = False  # `-C 1`: the time columns hold the CPU time of the launches
    out_of_bounds: int | None = None  # the footer's `Out of bounds values`
    out_of_bounds_failed: bool = False
    avg_busbw_gbps: Printed | None = None  # the footer's `Avg bus bandwidth`
    start_time: str | None = None  # JSON: local start time, as written
    env: dict[str, str] = field(default_factory=dict)  # JSON: NCCL_* / RCCL_* variables
    declared_ranks: int | None = None  # the world size a file states without device lines (rccl-tests' `gpus`)
    command_line: str = ""  # JSON: its `args`, joined
