"""The measurement's vocabulary: every fixed set of words a result carries, in one module at the bottom.

Every package may import this module (`suite`, `runners`, `db`, `reports`); it imports nothing of
the project and nothing outside the standard library. Each set is a `StrEnum`: a member equals its
string (`ResultStatus.OK == "ok"`), so the database, the results frames and the JSON outputs hold
plain text; the exit codes of the commands are the one `IntEnum`. docs/fixed-sets-and-rules.md says
who decides each value and who reads it.
"""
from __future__ import annotations

from enum import IntEnum, StrEnum


def allowed(values: type[StrEnum] | tuple[StrEnum, ...]) -> str:
    """`a, b, c`: the values of a fixed set, for a message."""
    return ", ".join(str(v) for v in values)


# -- what became of a case, and of a run ------------------------------------------------------


class ResultStatus(StrEnum):
    """What became of one case on one device."""

    OK = "ok"  # measured and correct
    INCORRECT = "incorrect"  # the output did not match the reference
    FAILED = "failed"  # the op raised
    CRASHED = "crashed"  # the worker died, timed out or lost its device context
    SKIPPED = "skipped"  # the case cannot run here (dtype, backend, memory, mode)


# results that are a fault of the op or of the machine (not a skip)
FAULTS = (ResultStatus.INCORRECT, ResultStatus.FAILED, ResultStatus.CRASHED)
# a cross-check of a peer timer: no worker of its own, so it cannot crash
CHECK_STATUSES = (ResultStatus.OK, ResultStatus.SKIPPED, ResultStatus.FAILED, ResultStatus.INCORRECT)


class RunStatus(StrEnum):
    """Where a run (or one shard of it) stands.

    complete: every case of the run's spec has a result on every device of the run; partial: the run
    finished what it was asked, but filters left cases of its spec without a result."""

    RUNNING = "running"
    COMPLETE = "complete"
    PARTIAL = "partial"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


# how bad a finished status is, for the status of a run made of shards (the worst of them)
FINISHED_RANK = {RunStatus.COMPLETE: 0, RunStatus.PARTIAL: 1, RunStatus.INTERRUPTED: 2, RunStatus.FAILED: 3}


# -- the device ---------------------------------------------------------------------------------


class DeviceKind(StrEnum):
    """The kind of device a case runs on: the one answer to "is this a GPU or a CPU"."""

    CPU = "cpu"
    CUDA = "cuda"


def device_kind_of(torch_device: str) -> DeviceKind:
    """The kind of a torch device string: `cuda`, `cuda:1` -> CUDA; `cpu` -> CPU (ValueError otherwise).
    The one test of "is this a GPU" (tests/test_each_rule_once.py holds that)."""
    return DeviceKind(str(torch_device).partition(":")[0])


def device_index_of(torch_device: str) -> int | None:
    """The index a torch device string names: `cuda:1` -> 1; None when it names none (`cuda`, `cpu`)."""
    _, colon, index = str(torch_device).partition(":")
    return int(index) if colon and index.isdigit() else None


# -- how a sample is taken ----------------------------------------------------------------------


class CacheMode(StrEnum):
    COLD = "cold"  # the cache is flushed before each timed call
    HOT = "hot"  # repeated calls on a warm cache


class TimingMode(StrEnum):
    LAUNCH = "launch"  # each sample times one launch (CUDA events on a GPU, perf_counter on a CPU)
    # each sample times the replay of a CUDA graph holding back-to-back launches, divided by their
    # count, which removes the CPU launch overhead (CUDA only)
    GRAPH = "graph"


CACHE_MODES = tuple(CacheMode)
TIMING_MODES = tuple(TimingMode)


class SampleKind(StrEnum):
    """What one sample of an op measures (an op's `sample_kind`)."""

    DEVICE_TIME = "device_time"  # GPU time of one launch (event pair), host time on a CPU
    HOST_PER_LAUNCH = "host_per_launch"  # host wall time per launch of back-to-back launches, one sync at the end


class Clock(StrEnum):
    """Whose clock timed the samples (the measurement's `clock`)."""

    CUDA_EVENTS = "cuda_events"  # a CUDA event pair on the stream: device time
    PERF_COUNTER = "perf_counter"  # time.perf_counter_ns on the host


class SyncMethod(StrEnum):
    """What kept host time out of the samples (the measurement's `sync_method`)."""

    BLOCKING_KERNEL = "blocking_kernel"
    SLEEP_KERNEL = "sleep_kernel"
    HOST_SYNC = "host_sync"
    UNHELD = "unheld"  # GPU, asked for (a peer's mode): event pairs queued back to back, no hold, no sync between
    NONE = "none"


class FlushMethod(StrEnum):
    """How the cache is made cold before a sample (a setting, and the measurement's `flush_method`).

    The sweep covers at least the cache (runners.engine.flush sizes it); docs/timing.md says why
    writing is the default."""

    WRITE_SWEEP = "write_sweep"  # a write of the whole buffer: the cache ends full of dirty lines
    READ_SWEEP = "read_sweep"  # a read-only pass: the cache ends holding clean lines only
    NONE = "none"  # hot mode: no flush (recorded only, never a setting)


class Pace(StrEnum):
    """How samples follow one another (a setting, and the measurement's `pace`)."""

    BACK_TO_BACK = "back_to_back"  # each sample right behind the previous one (batched behind a stream hold)
    IDLE = "idle"  # synchronise after each sample, then leave the device idle at least as long as the sample took
    # recorded, never a setting: a collective timed `isolated`, each sample one call that starts at
    # a barrier of the whole group (after its input is restored), neither right behind the
    # previous call nor after a rest
    BARRIER = "barrier"


class CollectiveMode(StrEnum):
    """How a collective case is timed (its op's `mode` parameter, and the measurement's
    `collective_mode`); runners/engine/group_timing.py times both."""

    # nccl-tests' method: N calls back to back under one clock per rank, that clock / N, the ranks averaged
    STREAM = "stream"
    ISOLATED = "isolated"  # a barrier, then one call per sample; the slowest rank's time


class RankCombination(StrEnum):
    """How a collective's timer makes one figure of its ranks' own (runners.engine.group_timing's
    MODE_COMBINATION says which each collective mode uses; a cross-check names a peer's)."""

    MEAN = "mean"  # nccl-tests' default (`-a 1`): the ranks' times averaged
    SLOWEST = "slowest"  # the slowest rank's time


class PairDirection(StrEnum):
    """Which way a pair of the link matrix sends (suite/ops/pairs.py): its ends a and b are the lower
    and the higher rank of the pair."""

    A_TO_B = "a_to_b"  # a sends, b receives
    B_TO_A = "b_to_a"  # b sends, a receives
    BOTH = "both"  # each sends to the other at once (bidirectional)


class Tool(StrEnum):
    """Which tool measured a result (the measurement's `tool`): rooflab's own engine, or a peer
    whose output file was imported. A series never joins two tools."""

    ROOFLAB = "rooflab"
    NCCL_TESTS = "nccl-tests"
    RCCL_TESTS = "rccl-tests"
    NVBENCH = "nvbench"
    BABELSTREAM = "babelstream"
    NVBANDWIDTH = "nvbandwidth"


class SeriesBy(StrEnum):
    """What a history series follows (reports/data/devices.py): one physical device (the default), or a
    model's devices aggregated, the median of their results in a run (the explicit model-level view)."""

    DEVICE = "device"  # one case on one physical device (its device_key)
    MODEL = "model"  # one case on one device fingerprint: the median over its devices in each run


class StopReason(StrEnum):
    """Why sampling stopped (runners.engine.stopping decides; the database stores the value): the CI
    reached the target precision, the CI is no wider than the clock's resolution, the noise estimate
    settled, or a bound was hit."""

    CONVERGED = "converged"
    CLOCK_RESOLUTION = "clock_resolution"
    NOISE_SETTLED = "noise_settled"
    MAX_SAMPLES = "max_samples"
    MAX_TIME = "max_time"


# stop reasons of a case that never reached its target precision: it ran out of time or samples, or
# its noise estimate settled above the target (an inherently noisy case)
UNCONVERGED_STOPS = (StopReason.MAX_TIME, StopReason.MAX_SAMPLES, StopReason.NOISE_SETTLED)


# -- how far a result can be trusted ------------------------------------------------------------


class Quality(StrEnum):
    """A result judged by its own samples and its machine (suite.quality holds the rule)."""

    GOOD = "good"
    NOISY = "noisy"
    CONTENDED = "contended"


# -- what a result means ------------------------------------------------------------------------


class CeilingKind(StrEnum):
    """A measured roof of a device (reports.roofs.ceilings says which results set each)."""

    HBM_RW = "hbm_rw"  # memory bandwidth, reads and writes (GB/s)
    HBM_RO = "hbm_ro"  # memory bandwidth, reads only (GB/s)
    HBM_WO = "hbm_wo"  # memory bandwidth, writes only (GB/s)
    L2 = "l2"  # cache bandwidth, hot (GB/s)
    VECTOR = "vector"  # FMA throughput off the tensor cores (TFLOP/s)
    MATRIX = "matrix"  # GEMM throughput per dtype (TFLOP/s)
    LAUNCH = "launch"  # the launch floor (ms per launch)
    ELEMENTARY = "elementary"  # elementary-function throughput per function and dtype (Geval/s)
    INTERCONNECT = "interconnect"  # best large-message bus bandwidth per collective and world size (GB/s)
    COMM_LATENCY = "comm_latency"  # a collective's latency floor: its smallest messages (ms)


# the device-memory roofs: mixed, read-only, write-only
HBM_CEILINGS = (CeilingKind.HBM_RW, CeilingKind.HBM_RO, CeilingKind.HBM_WO)


class ElementaryFunction(StrEnum):
    """The elementary functions an op may declare (`Op.elementary`) and the `elementary` probe
    measures: each is one FLOP in an op's model, but dozens of instructions or a special-function
    unit slot on the hardware, so each has a throughput roof of its own (docs/counters.md)."""

    COS = "cos"
    EXP = "exp"
    ERF = "erf"


class BytesReason(StrEnum):
    """The likeliest reason why a case's DRAM bytes, counted by the hardware, differ from its model."""

    EXTRA_TRAFFIC = "extra_traffic"  # more: intermediates written and read back, inputs read more than once
    SERVED_FROM_L2 = "served_from_l2"  # fewer: part of the data came from, or stayed in, the L2
    # fewer writes than the model, with the write-back caught inside the profiled range: the model
    # counts writes the call did not make
    FEWER_WRITES = "fewer_writes"


class Wall(StrEnum):
    """The wall a case hits (reports.walls.diagnosis decides)."""

    COMPUTE = "compute"
    BANDWIDTH = "bandwidth"
    OVERHEAD = "overhead"
    COMMS = "comms"  # a collective bound by the interconnect's bandwidth


# -- where a case's FLOPs run -----------------------------------------------------------------

# families whose FLOPs are matrix products (a layer's FLOPs are nearly all matmul FLOPs): held
# against the matrix roof of their dtype (reports.roofs.ceilings) ...
MATRIX_FAMILIES = ("gemm", "attention", "layer")
# ... and the dtypes in which matrix products run on tensor cores: no vector roof of their own on a
# datasheet, and FLOPs that the counters' FP instruction counts do not see (db.counters)
TENSOR_CORE_DTYPES = ("tf32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8")


def on_tensor_cores(family: str | None, dtype: str | None) -> bool:
    """Whether a case's model FLOPs run on tensor cores: a matrix family in a tensor-core dtype (a
    float32 GEMM without TF32 runs on FFMA)."""
    return family in MATRIX_FAMILIES and dtype in TENSOR_CORE_DTYPES


# -- how a command ends -----------------------------------------------------------------------


class ExitCode(IntEnum):
    """The exit codes of rooflab's commands (runners/cli/epilogue.py ends every command with one)."""

    OK = 0
    FAILED = 1  # the work ran and found what fails it: a failed run, a regression (--fail-on), a rank's fault
    BAD_INPUT = 2  # invalid input: one `error:` line, nothing written
    DEVICE_BUSY = 75  # another run holds a device's lock (sysexits EX_TEMPFAIL: try again later)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    STOPPED = 143  # SIGTERM between two cases, obeyed (128 + SIGTERM)
