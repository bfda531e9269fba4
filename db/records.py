"""The records that go into the database: the contract between whoever measures and `db`.

`db` knows nothing of torch or of the op library: a runner turns its measurement into these plain,
frozen records, and `db.store.ResultStore` writes them. Field names carry their units.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rooflab.db import rates
from rooflab.db.status import ResultStatus


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
    device_kind: str  # "cuda" or "cpu"
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


@dataclass(frozen=True)
class CaseRecord:
    case_key: str
    op: str
    op_version: int
    family: str
    backend: str
    dtype: str
    params: Mapping[str, Any]


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
class MeasurementRecord:
    """One case measured (or not) in one run on one device."""

    run_id: str
    case: CaseRecord
    device_fingerprint: str
    cache: str  # a suite.case.CacheMode: "cold" | "hot"
    timing_mode: str  # a suite.case.TimingMode: "launch" | "graph"
    status: str  # a ResultStatus (db.status)
    measured_at: datetime  # timezone-aware UTC
    device_uuid: str | None = None  # which GPU of the node (or None on a CPU)
    shard: str | None = None  # "I/N" when the run is sharded
    error: str | None = None  # why it failed / was skipped / is incorrect
    clock: str | None = None  # "cuda_events" | "perf_counter"
    # statistics of the kept samples (None unless status == "ok")
    median_ms: float | None = None
    mean_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    iqr_ms: float | None = None
    std_ms: float | None = None
    n_samples: int = 0
    rel_ci_halfwidth: float | None = None  # half-width of the 95 % CI of the median / median
    stop_reason: str | None = None  # a suite.timing.StopReason: why sampling stopped
    first_call_ms: float | None = None  # first call, before warmup (compile, autotune)
    warmup_calls: int = 0
    launches_per_sample: int = 1  # graph mode: launches replayed per sample
    flush_bytes: int = 0  # size of the L2 flush buffer written before each cold sample
    # work model (always filled from the op's pure functions, even for failed cases)
    flops: int = 0
    bytes: int = 0
    # environment around the case
    sm_clock_start_mhz: float | None = None
    sm_clock_end_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    throttled: bool = False  # clock below 75 % of max while busy, or thermal/hardware slowdown seen
    sync_method: str | None = None  # what held the stream while a batch was enqueued
    flush_method: str | None = None  # how the cache was cleaned before a cold sample
    pace: str | None = None  # how the samples followed one another: back_to_back | idle (revision 0007)
    power_w: float | None = None  # average board power while the case ran
    energy_j: float | None = None  # energy per call
    quality: str | None = None  # "good" | "noisy" | "contended" (None: not judged)
    quality_reasons: tuple[str, ...] = ()  # what made it noisy or contended
    cpu_threads: int | None = None  # intra-op threads of a CPU case
    samples_ms: tuple[float, ...] = field(default=(), repr=False)
    layer_profile: LayerProfileRecord | None = None  # ops made of parts (status ok only)

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte (None when bytes are 0)."""
        return self.flops / self.bytes if self.bytes else None

    @property
    def tflops(self) -> float | None:
        if self.status != ResultStatus.OK or not self.median_ms:
            return None
        return rates.tflops(self.flops, self.median_ms)

    @property
    def gbps(self) -> float | None:
        if self.status != ResultStatus.OK or not self.median_ms:
            return None
        return rates.gbps(self.bytes, self.median_ms)
