"""Split an expanded suite into N shards of about equal estimated cost.

Every shard process computes the whole partition on its own and keeps its part, so N processes
that start from the same cases and the same cost function cover the suite exactly once between
them without talking to each other. The partition is longest-processing-time-first: cases sorted
by (estimated cost descending, case_key), each given to the shard with the least cost so far
(ties to the lower shard index). Nothing in it depends on input order, hashing seeds, the host or
the clock.

Costs come from the previous run's medians when the database has them (`previous_medians`), else
from the op's bytes and FLOPs at nominal rates (`estimate_cost_s`). Only balance depends on the
costs; coverage does not, as long as all shards use the same costs.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rooflab.db import rates
from rooflab.db.cost_basis import latest_medians
from rooflab.db.handle import as_database
from rooflab.db.shards import ShardFormatError
from rooflab.db.shards import parse_shard as parse_stored_shard
from rooflab.suite.case import Case
from rooflab.suite.errors import SpecError
from rooflab.suite.ops.registry import get_op
from rooflab.suite.timing import TimingSettings, idle_after_ms
from rooflab.vocab import CacheMode, Pace

if TYPE_CHECKING:  # SQLAlchemy loads when a previous run's medians are read
    from rooflab.db.handle import Database

# Nominal rates of the cost model. They only decide how cases are spread over shards (relative
# costs), never a reported figure; they are of the order of a current data-centre GPU.
NOMINAL_GBPS = 2000.0  # DRAM bandwidth
NOMINAL_TFLOPS = 200.0  # dense matrix throughput
PREPARE_GBPS = 20.0  # building seeded random inputs and the float64 reference, per byte of memory
CALL_OVERHEAD_S = 10e-6  # launch + Python overhead of one timed call
COLD_FLUSH_S = 50e-6  # writing the L2 flush buffer before each cold sample
CASE_OVERHEAD_S = 0.25  # per case: worker round trip, correctness check, environment reads


class ShardError(SpecError):
    """A shard string is invalid (a SpecError, so the CLI prints it and exits with code 2)."""


def parse_shard(text: str) -> tuple[int, int]:
    """`"I/N"` -> `(I, N)` as given to --shard (white space ignored): db.shards.parse_shard's rule."""
    try:
        return parse_stored_shard("".join((text or "").split()))
    except ShardFormatError as exc:
        raise ShardError(f"--shard {text!r}: {exc.reason}") from None


def format_shard(index: int, count: int) -> str:
    """`(I, N)` -> `"I/N"`, the form stored with each measurement."""
    return f"{index}/{count}"


def _order(cases: Iterable[Case], cost_s: Callable[[Case], float]) -> list[tuple[float, Case]]:
    costed = []
    for case in cases:
        cost = float(cost_s(case))
        if not cost >= 0.0:  # also rejects NaN
            raise ValueError(f"cost of {case.case_key} is {cost!r}; costs must be finite and >= 0")
        costed.append((cost, case))
    # case_key decides ties; benchmark and tags separate two entries with the same key.
    costed.sort(key=lambda item: (-item[0], item[1].case_key, item[1].benchmark, item[1].tags))
    return costed


def partition(cases: Iterable[Case], count: int, cost_s: Callable[[Case], float]) -> list[list[Case]]:
    """All `count` shards, each in the order its cases were assigned (costliest first)."""
    if count < 1:
        raise ValueError("count must be at least 1")
    shards: list[list[Case]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for cost, case in _order(cases, cost_s):
        target = min(range(count), key=lambda i: (loads[i], i))
        shards[target].append(case)
        loads[target] += cost
    return shards


def select_shard(
    cases: Sequence[Case], index: int, count: int, cost_s: Callable[[Case], float]
) -> list[Case]:
    """The cases of shard `index` (0-based) of `count`, in the input's order."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is not in 0..{count - 1}")
    mine = {id(case) for case in partition(cases, count, cost_s)[index]}
    return [case for case in cases if id(case) in mine]


def shard_loads_s(cases: Iterable[Case], count: int, cost_s: Callable[[Case], float]) -> list[float]:
    """Estimated seconds of each shard (for logs and for balance checks)."""
    return [sum(cost_s(case) for case in shard) for shard in partition(cases, count, cost_s)]


def sampling_time_s(per_call_s: float, timing: TimingSettings, cache: str) -> float:
    """Expected wall time of warmup and sampling for a call of `per_call_s`, under `timing`.

    Warmup lasts max(warmup_ms, warmup_calls calls); sampling runs at least min_time_ms and
    min_samples samples, and gives up after max_time_ms (but not before min_samples); at pace idle
    each sample is followed by a rest of about its own length.
    """
    per_sample_s = per_call_s + (COLD_FLUSH_S if cache == CacheMode.COLD else 0.0)
    if timing.pace == Pace.IDLE:  # a rest as long as the sample after each one
        per_sample_s += idle_after_ms(per_call_s * 1e3) / 1e3
    warmup_s = max(timing.warmup_ms * 1e-3, timing.warmup_calls * per_call_s) + per_call_s
    floor_s = timing.min_samples * per_sample_s
    sample_s = min(max(timing.min_time_ms * 1e-3, floor_s), timing.max_time_ms * 1e-3)
    return warmup_s + max(sample_s, floor_s)


def model_call_s(case: Case) -> tuple[float, int]:
    """(seconds per call, memory bytes) of `case` from its op's FLOP/byte model at nominal rates.

    An op the registry does not know costs the call overhead only.
    """
    try:
        op = get_op(case.op)
    except KeyError:
        return CALL_OVERHEAD_S, 0
    params = op.resolved_params(case.params)
    flops = op.flops(params, case.dtype)
    nbytes = op.bytes(params, case.dtype)
    memory = op.memory_bytes(params, case.dtype)
    work_s = max(rates.ms_at_gbps(nbytes, NOMINAL_GBPS), rates.ms_at_tflops(flops, NOMINAL_TFLOPS)) / rates.MS_PER_S
    return CALL_OVERHEAD_S + work_s, memory


def estimate_cost_s(case: Case, previous_medians: Mapping[str, float] | None = None) -> float:
    """Estimated wall seconds to measure `case`.

    With a previous median for its case_key: that median per call; otherwise the op's model.
    Either way the timing settings turn it into warmup + sampling time, plus the cost of
    preparing inputs and a fixed per-case overhead.
    """
    memory = 0
    median_ms = previous_medians.get(case.case_key) if previous_medians else None
    if median_ms is not None and median_ms > 0:
        per_call_s = median_ms * 1e-3
        try:
            memory = model_call_s(case)[1]
        except ImportError:
            memory = 0
    else:
        per_call_s, memory = model_call_s(case)
    prepare_s = rates.ms_at_gbps(memory, PREPARE_GBPS) / rates.MS_PER_S
    return CASE_OVERHEAD_S + prepare_s + sampling_time_s(per_call_s, case.timing, case.cache)


@dataclass(frozen=True)
class CostBasis:
    """The per-case medians a partition was balanced with, and the run they came from."""

    run_id: str | None = None  # None: no earlier run, the op model is used
    medians_ms: Mapping[str, float] = field(default_factory=dict)

    def cost_s(self, case: Case) -> float:
        return estimate_cost_s(case, self.medians_ms)

    def covering(self, cases: Iterable[Case]) -> CostBasis:
        """This basis if it has a median for every case, else an empty one (the op model for all).

        Shards that read different databases (node-local SQLite files, each holding only its own
        shard's history) then still agree: none of them covers every case, so all use the model.
        """
        if all(case.case_key in self.medians_ms for case in cases):
            return self
        return CostBasis()


def previous_medians(
    db_url: str | Database,
    *,
    suite: str | None = None,
    device_fingerprint: str | None = None,
    current_run_id: str | None = None,
) -> CostBasis:
    """Per case_key, its median in the latest earlier run (of `suite`, on `device_fingerprint`).

    "Earlier" is by run order (db.query's run_order), never by the clock of a measurement: the
    run `current_run_id` and runs ordered after it are ignored, so shards of one run that start
    hours apart, on nodes with skewed clocks, pick the same basis. They can disagree only if
    another run ordered before this one writes results for the same cases between their starts;
    passing `suite` (the spec's name) keeps unrelated runs out. Only `ok` results count; several
    GPUs of one run give the median of their medians. No earlier result: an empty basis (the op
    model is used). `db_url` is a URL or the command's db.handle.Database.
    """
    database, owned = as_database(db_url)
    try:
        return _previous_medians(database, suite, device_fingerprint, current_run_id)
    finally:
        if owned:
            database.close()


def _previous_medians(database: Any, suite: str | None, device_fingerprint: str | None,
                      current_run_id: str | None) -> CostBasis:
    # "empty": nothing stored yet; "foreign": tables without a version, seen while another shard is
    # creating the schema (and refused by the store right after, if it really is foreign)
    if database.state().kind in ("empty", "foreign"):
        return CostBasis()
    run_id, medians_ms = latest_medians(database, suite=suite, device_fingerprint=device_fingerprint,
                                        current_run_id=current_run_id)
    return CostBasis(run_id=run_id, medians_ms=medians_ms)
