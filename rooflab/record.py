"""The measurement record: one typed, nested record of one case measured in one run on one device.

Who fills what (docs/development.md, "Adding a measured field"):

- the timing engine (runners.engine.timing) returns the samples, their `Statistics` and the
  `TimingMethod` it used;
- the worker (runners.orchestration.worker) adds its `MachineObservation` (clocks, power, quality)
  and the status, and sends them to the supervisor as a `runners.orchestration.messages.CaseOutcome`;
- the supervisor adds the `Identity` (run, case, device) and the op's `WorkModel`, and hands the
  `MeasurementRecord` to `db.store.ResultStore.add_measurement`.

The database derives everything else from these dataclasses (db/columns.py): every leaf field is a
column of `measurements` under its own name (names are unique across the parts), typed from its
annotation and the `col()` metadata below; the export columns after the contract ones, and how a
column reads from a file, follow the same fields. Only the fields marked `stored=False` are not
columns (the raw samples and a block's profile have tables of their own; the CI ends and the
phase durations are kept in memory only).

The other records here (run, environment, case, layer profile) are what a runner hands the store
beside the measurements. This module imports nothing of the project but the vocabulary.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rooflab.vocab import ResultStatus, TimingMode


@dataclass(frozen=True)
class Column:
    """How a record field is stored as a column of `measurements` (db/columns.py reads it)."""

    length: int | None = None  # width of a text column; None: unbounded text (a str field)
    big: bool = False  # a whole number that may exceed 2**31 (bytes, FLOPs): a 64-bit column
    stored: bool = True  # False: kept in the record only (not a column of `measurements`)
    empty: Any = None  # the column's value when its part of the record is absent (a case not timed)
    server_default: str | None = None  # SQL text the database fills in for rows older than the column


def col(default: Any = dataclasses.MISSING, **column: Any) -> Any:
    """A record field with its storage metadata (`Column`), and its default if it has one."""
    return field(default=default, metadata={"column": Column(**column)})


def column_of(f: dataclasses.Field) -> Column:
    """The storage metadata of a record field (the defaults of `Column` when it has none)."""
    meta = f.metadata.get("column")
    return meta if isinstance(meta, Column) else Column()


# -- the parts of a measurement ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Statistics:
    """Summary of n timing samples (milliseconds), derived from them (runners.engine.stats)."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p10_ms: float
    p90_ms: float
    iqr_ms: float  # p75 - p25
    std_ms: float | None  # sample standard deviation (ddof=1); None for a single sample
    n_samples: int = col(empty=0)
    ci_low_ms: float | None = col(None, stored=False)  # 95 % CI of the median; None below 6 samples
    ci_high_ms: float | None = col(None, stored=False)
    rel_ci_halfwidth: float | None = None  # (ci_high - ci_low) / 2 / median; None without a CI


@dataclass(frozen=True, kw_only=True)
class TimingMethod:
    """How the samples were taken: the case's modes, the clock, the hold, the flush, the stop."""

    cache: str = col(length=16)  # a CacheMode
    timing_mode: str = col(TimingMode.LAUNCH.value, length=16)  # a TimingMode
    clock: str | None = col(None, length=32)  # a Clock
    stop_reason: str | None = col(None, length=32)  # a StopReason: why sampling stopped
    first_call_ms: float | None = None  # the first call, timed apart (compile, autotune, allocator)
    warmup_calls: int = 0  # discarded units (calls in launch mode, graph replays in graph mode)
    launches_per_sample: int = 1  # graph mode: launches replayed per sample
    flush_bytes: int = col(0, big=True)  # bytes swept before each cold sample (0 when hot)
    sync_method: str | None = col(None, length=32)  # a SyncMethod: what held the stream
    flush_method: str | None = col(None, length=32)  # a FlushMethod: how the cache was cleaned
    pace: str | None = col(None, length=16)  # a Pace: how the samples followed one another
    collective_mode: str | None = col(None, length=16)  # a CollectiveMode (collectives only)
    tool: str = col("rooflab", length=32, server_default="'rooflab'")  # a Tool: which tool measured it
    tool_version: str | None = col(None, length=64)  # that tool's version (None for rooflab's own results)
    warmup_ms: float | None = col(None, stored=False)  # host wall time of the warmup
    sampling_ms: float | None = col(None, stored=False)  # host wall time of the sampling phase


@dataclass(frozen=True, kw_only=True)
class MachineObservation:
    """What the machine did while the case ran, and how far the result can be trusted."""

    sm_clock_start_mhz: float | None = None
    sm_clock_end_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    throttled: bool = False  # clock below 75 % of max while busy, or thermal/hardware slowdown seen
    power_w: float | None = None  # average board power while the case ran
    energy_j: float | None = None  # energy per call
    quality: str | None = col(None, length=16)  # a Quality (None: not judged)
    quality_reasons: tuple[str, ...] = col((), server_default="'[]'")  # what made it noisy or contended
    cpu_threads: int | None = None  # intra-op threads of a CPU case


@dataclass(frozen=True, kw_only=True)
class WorkModel:
    """The op's model of one call's work (its pure functions), filled whatever the status."""

    flops: int = col(0, big=True)
    bytes: int = col(0, big=True)  # the minimum: each input read once, each output written once
    # of `bytes`, those read and those written (their sum); None, both, where the split is unknown:
    # a result stored before it was recorded, a collective (its bytes are link bytes)
    bytes_read: int | None = col(None, big=True)
    bytes_written: int | None = col(None, big=True)

    def __post_init__(self) -> None:
        problem = byte_split_problem(self.bytes, self.bytes_read, self.bytes_written)
        if problem:
            raise ValueError(f"WorkModel: {problem}")

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte (None when bytes are 0)."""
        return self.flops / self.bytes if self.bytes else None


def byte_split_problem(total: int | None, read: int | None, written: int | None) -> str | None:
    """What is wrong with a result's bytes read and written beside its total bytes, or None: both
    are given or neither (unknown), and given, they add up to the total. The one rule, for the
    record and for an imported file."""
    if (read is None) != (written is None):
        return (f"bytes_read ({read}) and bytes_written ({written}) go together: give both (their sum is bytes) "
                "or neither (the split unknown)")
    if read is not None and written is not None and total is not None and read + written != total:
        return f"bytes_read + bytes_written ({read} + {written} = {read + written}) must equal bytes ({total})"
    return None


@dataclass(frozen=True)
class CaseRecord:
    case_key: str
    op: str
    op_version: int
    family: str
    backend: str
    dtype: str
    params: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class Identity:
    """Which result this is: run, case and device (the run, case and environment rows are keys)."""

    run_id: str = col(stored=False)
    case: CaseRecord = col(stored=False)
    device_fingerprint: str = col(stored=False)
    device_uuid: str | None = col(None, length=128)  # which GPU of the node (or None on a CPU)
    shard: str | None = col(None, length=32)  # "I/N" when the run is sharded
    measured_at: datetime  # timezone-aware UTC


@dataclass(frozen=True)
class LayerPartRecord:
    """One part of a block (a transformer layer's norm, projection, attention, ...) as one
    profiled execution measured it, with the op library's work model of the part."""

    position: int  # order in which the part runs
    name: str
    kind: str  # matmul | attention | memory | backward
    time_ms: float  # device kernel time (GPU) or top-level CPU operator time (CPU) inside its range
    flops: int
    bytes: int
    events: int  # kernels (GPU) or operators (CPU) counted


@dataclass(frozen=True)
class LayerProfileRecord:
    """One profiled execution of a block, split into its parts (runners.engine.attribution).

    sum(parts' time_ms) + unattributed_ms + gap_ms - overlap_ms = whole_ms."""

    clock: str  # "cuda_kernels" or "cpu_ops"
    whole_ms: float  # first kernel start to last kernel end (GPU), or the block's range (CPU)
    gap_ms: float  # inside the whole, covered by no kernel / operator
    unattributed_ms: float  # kernels / operators inside the whole but outside every part's range
    overlap_ms: float  # time counted twice because kernels / operators ran concurrently
    host_ms: float  # host wall time of the profiled call, profiler included
    events: int
    parts: tuple[LayerPartRecord, ...] = ()


@dataclass(frozen=True)
class CollectiveRecord:
    """The group of rank processes a collective case (family collective) ran in.

    `ranks` is the world size the case resolved to (`ranks: all` becomes the run's GPU count), a
    column of `measurements`; the rest is kept in the `collectives` table (db/collectives.py):
    `rank_medians_ms` each rank's own median over the same samples (the case's samples are the
    ranks' mean in `stream` mode, the slowest rank's in `isolated` mode), so a straggler shows;
    `rank_devices` where each rank ran (host and device, with the GPU's UUID); `comm_version` the
    NCCL version (None on gloo) and `comm_settings` the NCCL_* / TORCH_NCCL_* / GLOO_* variables the
    ranks ran with."""

    ranks: int
    rank_medians_ms: tuple[float, ...] = col((), stored=False)
    rank_devices: tuple[str, ...] = col((), stored=False)
    comm_version: str | None = col(None, stored=False)
    comm_settings: Mapping[str, str] = field(default_factory=dict, metadata={"column": Column(stored=False)})


@dataclass(frozen=True, kw_only=True)
class MeasurementRecord:
    """One case measured (or not) in one run on one device: the parts above, the status and the
    raw samples. A case that was not timed has no `stats` and an empty method and observation."""

    identity: Identity
    status: str = col(length=16)  # a ResultStatus
    error: str | None = None  # why it failed / was skipped / is incorrect (or a note on an ok one)
    method: TimingMethod
    stats: Statistics | None = None  # only when status is ok
    machine: MachineObservation = MachineObservation()
    work: WorkModel = WorkModel()
    samples_ms: tuple[float, ...] = col((), stored=False)  # the raw samples (table `samples`)
    layer_profile: LayerProfileRecord | None = col(None, stored=False)  # ops made of parts (status ok)
    collective: CollectiveRecord | None = None  # collectives: the group they ran in (any status)

    @property
    def ok(self) -> bool:
        return self.status == ResultStatus.OK

    @property
    def median_ms(self) -> float | None:
        """The result's figure (None unless it was timed)."""
        return self.stats.median_ms if self.stats is not None else None

    @property
    def ranks(self) -> int | None:
        """The world size of a collective (None for every other case)."""
        return self.collective.ranks if self.collective is not None else None


# -- what a run hands the store beside its measurements ----------------------------------------


@dataclass(frozen=True)
class EnvironmentRecord:
    """The state of one device and its software, as seen by one run.

    `identity` holds exactly the fields that decide comparability and that `device_fingerprint`
    is a hash of (model, memory, driver major, CUDA major, torch version); `info` holds the rest
    (UUID, clocks, power limit, ECC/MIG, host, OS, versions, ...). Two results are comparable
    when their fingerprints are equal.
    """

    device_fingerprint: str
    device_name: str
    device_kind: str  # a DeviceKind: "cuda" or "cpu"
    identity: Mapping[str, Any]
    info: Mapping[str, Any]
    memory_bytes: int = 0
    l2_bytes: int = 0  # L2 of a GPU, last-level cache of a CPU
    sm_count: int = 0
    compute_capability: str | None = None  # "9.0"
    driver_version: str | None = None
    cuda_version: str | None = None
    torch_version: str | None = None


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    suite: str  # spec name, e.g. "quick"
    spec_text: str
    spec_hash: str  # sha256 of spec_text
    started_at: datetime  # timezone-aware UTC
    host: str
    command_line: str
    git_commit: str | None = None
    git_dirty: bool = False
    rooflab_version: str = ""


def _owners() -> dict[str, str]:
    """Flat field name -> the part of MeasurementRecord that holds it ("" for its own fields)."""
    owner = {f.name: "" for f in dataclasses.fields(MeasurementRecord) if f.name not in _PARTS}
    for part, part_type in _PARTS.items():
        owner.update({g.name: part for g in dataclasses.fields(part_type)})
    return owner


def _split(values: Mapping[str, Any], caller: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    owner = _owners()
    own: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {part: {} for part in _PARTS}
    for name, value in values.items():
        if name not in owner:
            raise TypeError(f"{caller}: no record field is named {name!r}")
        if owner[name]:
            parts[owner[name]][name] = value
        else:
            own[name] = value
    return own, parts


def record_from_columns(**values: Any) -> MeasurementRecord:
    """A MeasurementRecord from flat names, as its columns are named (`median_ms=...`, `run_id=...`):
    each name goes to the part that holds it; an optional part (the statistics, a collective's group)
    is made when any of its fields is given a value other than its column's empty one (None, or
    the `empty` of its `col()`: 0 samples).
    An unknown name raises TypeError. For callers that hold flat rows (tests, plugins, importers)."""
    own, parts = _split(values, "record_from_columns")
    for name, given in parts.items():
        if name not in _OPTIONAL_PARTS or any(v != _EMPTY[name].get(k) for k, v in given.items()):
            own[name] = _PARTS[name](**given)
    return MeasurementRecord(**own)


def with_columns(m: MeasurementRecord, **values: Any) -> MeasurementRecord:
    """A copy of `m` with the fields named flat (as its columns are) replaced in their parts. A new
    `bytes` given without its split leaves the split unknown (bytes_read and bytes_written None)."""
    if "bytes" in values and not {"bytes_read", "bytes_written"} & set(values):
        values = {**values, "bytes_read": None, "bytes_written": None}
    own, parts = _split(values, "with_columns")
    for name, given in parts.items():
        if given:
            current = getattr(m, name)
            own[name] = dataclasses.replace(current, **given) if current is not None else _PARTS[name](**given)
    return dataclasses.replace(m, **own)


_PARTS: dict[str, Any] = {"identity": Identity, "method": TimingMethod, "stats": Statistics,
                          "machine": MachineObservation, "work": WorkModel, "collective": CollectiveRecord}
_OPTIONAL_PARTS = frozenset({"stats", "collective"})
# an optional part's field -> the value its column holds when the part is absent
_EMPTY = {name: {f.name: column_of(f).empty for f in dataclasses.fields(_PARTS[name])} for name in _OPTIONAL_PARTS}
