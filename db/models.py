"""The schema, as SQLAlchemy 2.0 typed ORM classes (portable across SQLite and PostgreSQL).

The Alembic revisions under `db/migrations/versions` create exactly these tables; a test checks
that the head revision and these models agree. Raw samples live in `samples`, one row per
measurement holding a little-endian float64 blob, so that summaries stay small and the samples
can be pruned on their own.
"""
from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    event,
    false,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rooflab.db import result_writes
from rooflab.db.measurement_columns import RecordColumn, record_columns
from rooflab.db.types import BigIntKey, UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
}


class Base(DeclarativeBase):
    # each model maps exactly one Table (DeclarativeBase types it as any FromClause), which is what
    # the inserts and updates in db.store and db.load need
    __table__: ClassVar[Table]
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[str]: JSON(),
        str: String(255),
        int: Integer(),
        float: Float(),
        bool: Boolean(),
    }


class Environment(Base):
    """One device + software identity; `device_fingerprint` is the hash of `identity`."""

    __tablename__ = "environments"

    id: Mapped[int] = mapped_column(primary_key=True)
    device_fingerprint: Mapped[str] = mapped_column(String(128), unique=True)
    device_name: Mapped[str]
    device_kind: Mapped[str] = mapped_column(String(16))
    identity: Mapped[dict[str, Any]]
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    l2_bytes: Mapped[int] = mapped_column(BigInteger)
    sm_count: Mapped[int]
    compute_capability: Mapped[str | None] = mapped_column(String(16))
    driver_version: Mapped[str | None] = mapped_column(String(64))
    cuda_version: Mapped[str | None] = mapped_column(String(64))
    torch_version: Mapped[str | None] = mapped_column(String(64))
    first_seen_at: Mapped[datetime]


class Run(Base):
    """One invocation of a suite (all its shards share the run_id). `id` is the run order."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[str] = mapped_column(String(128), unique=True)
    suite: Mapped[str] = mapped_column(String(128))
    spec_text: Mapped[str] = mapped_column(Text)
    spec_hash: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(index=True)
    finished_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(16))
    host: Mapped[str]
    git_commit: Mapped[str | None] = mapped_column(String(64))
    git_dirty: Mapped[bool]
    command_line: Mapped[str] = mapped_column(Text)
    rooflab_version: Mapped[str] = mapped_column(String(64))


class RunShard(Base):
    """One shard "I/N" of a run: who ran it and whether it finished (revision 0002)."""

    __tablename__ = "run_shards"
    __table_args__ = (UniqueConstraint("run_id", "shard", name="uq_run_shards_run_shard"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    shard: Mapped[str] = mapped_column(String(32))
    shard_count: Mapped[int]
    host: Mapped[str]
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]


class RunEnvironment(Base):
    """A device used by a run, with the informational fields seen at that time (clocks, UUID, ...)."""

    __tablename__ = "run_environments"
    __table_args__ = (
        UniqueConstraint("run_id", "environment_id", "device_key", name="uq_run_environments_device"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    device_key: Mapped[str] = mapped_column(String(128))  # device UUID, or the fingerprint without one
    device_uuid: Mapped[str | None] = mapped_column(String(128))
    info: Mapped[dict[str, Any]]


class Case(Base):
    """What is measured: `case_key` is stable across runs, machines and versions."""

    __tablename__ = "cases"

    id: Mapped[int] = mapped_column(primary_key=True)
    case_key: Mapped[str] = mapped_column(String(512), unique=True)
    op: Mapped[str] = mapped_column(String(64))
    op_version: Mapped[int]
    family: Mapped[str] = mapped_column(String(32))
    backend: Mapped[str] = mapped_column(String(32))
    dtype: Mapped[str] = mapped_column(String(32))
    params: Mapped[dict[str, Any]]


def _sql_type(column: RecordColumn) -> Any:
    """The SQL type of a record column: its kind, width and size (db/measurement_columns.py)."""
    if column.kind == "str":
        return String(column.column.length) if column.column.length else Text()
    if column.kind == "int":
        return BigInteger() if column.column.big else Integer()
    return {"float": Float(), "bool": Boolean(), "datetime": UTCDateTime(), "list": JSON()}[column.kind]


def _record_columns() -> list[Column]:
    """The columns of `measurements` that the measurement record fills (rooflab/record.py), then
    the derived ones: which device, and the rates (db/measurement_columns.py)."""
    out = [
        Column(c.name, _sql_type(c), nullable=c.nullable,
               server_default=text(c.column.server_default) if c.column.server_default else None)
        for c in record_columns()
    ]
    out.append(Column("device_key", String(128), nullable=False))  # device UUID, or the fingerprint without one
    out.extend(Column(name, Float(), nullable=True) for name in ("intensity", "tflops", "gbps"))  # rates_of
    return out


class Measurement(Base):
    """One case measured (or failed, skipped, ...) in one run on one device.

    Its columns besides the keys are derived from the measurement record: a field added there is a
    column here (and needs an Alembic revision; tests/db/test_schema.py holds the two together)."""

    __table__ = Table(
        "measurements",
        Base.metadata,
        Column("id", BigIntKey, primary_key=True),
        Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        Column("case_id", Integer, ForeignKey("cases.id"), nullable=False),
        Column("environment_id", Integer, ForeignKey("environments.id"), nullable=False),
        *_record_columns(),
        UniqueConstraint(
            "run_id", "case_id", "cache", "timing_mode", "device_key", name="uq_measurements_run_case_device"
        ),
    )
    if TYPE_CHECKING:  # the columns the code names directly (all of them are mapped from __table__)
        id: Mapped[int]
        run_id: Mapped[int]
        case_id: Mapped[int]
        environment_id: Mapped[int]
        device_key: Mapped[str]
        device_uuid: Mapped[str | None]
        cache: Mapped[str]
        timing_mode: Mapped[str]
        status: Mapped[str]
        measured_at: Mapped[datetime]
        median_ms: Mapped[float | None]
        flops: Mapped[int]
        bytes: Mapped[int]
        gbps: Mapped[float | None]
        ranks: Mapped[int | None]
        flush_method: Mapped[str | None]
        pace: Mapped[str | None]


# A case's history on one device, in run order (revision 0002).
Index("ix_measurements_history", Measurement.case_id, Measurement.environment_id, Measurement.run_id)
# A physical device's results in run order, and one series (a case on one device) among them (revision
# 0012; in run order since 0014, so that a night's results go to the end of each device's part).
Index("ix_measurements_device", Measurement.device_key, Measurement.run_id, Measurement.case_id)


class Sample(Base):
    """The raw samples of one measurement: `count` little-endian float64 values (milliseconds)."""

    __tablename__ = "samples"

    measurement_id: Mapped[int] = mapped_column(
        BigIntKey, ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True
    )
    count: Mapped[int]
    values_f64le: Mapped[bytes] = mapped_column(LargeBinary)


class CrossCheck(Base):
    """One case timed by rooflab and by one peer timer in the same process (revision 0004).

    `ratio` = rooflab_median_ms / peer_median_ms; spreads are relative; the per-round medians of
    both timers are kept. A peer that could not run leaves status skipped or failed with `error`.
    `contended` (revision 0006): the machine was seen contended while either timer ran.
    Revision 0009: `in_mode_ratio` = rooflab timed in the peer's mode / peer, on which `disagrees`
    is judged from then on; `ratio` is the method difference `method_differences` describes."""

    __tablename__ = "crosschecks"
    __table_args__ = (
        UniqueConstraint(
            "run_id", "case_id", "cache", "timing_mode", "device_key", "peer", name="uq_crosschecks_run_case_peer"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    case_id: Mapped[int] = mapped_column(ForeignKey("cases.id"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    device_key: Mapped[str] = mapped_column(String(128))
    cache: Mapped[str] = mapped_column(String(16))
    timing_mode: Mapped[str] = mapped_column(String(16))
    peer: Mapped[str] = mapped_column(String(32))
    peer_version: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    peer_cache: Mapped[str | None] = mapped_column(String(16))
    peer_clock: Mapped[str | None] = mapped_column(String(32))
    rounds: Mapped[int]
    rooflab_median_ms: Mapped[float | None]
    rooflab_spread: Mapped[float | None]
    peer_median_ms: Mapped[float | None]
    peer_spread: Mapped[float | None]
    ratio: Mapped[float | None]
    disagrees: Mapped[bool]
    likely_reason: Mapped[str | None] = mapped_column(String(32))
    rooflab_rounds_ms: Mapped[list[float]] = mapped_column(JSON)
    peer_rounds_ms: Mapped[list[float]] = mapped_column(JSON)
    measured_at: Mapped[datetime]
    contended: Mapped[bool] = mapped_column(server_default=false())
    contention_reasons: Mapped[list[str]] = mapped_column(JSON, server_default=text("'[]'"))
    # revision 0009: rooflab timed the way the peer times (its mode), and how the configured mode differs
    peer_mode: Mapped[str | None] = mapped_column(String(200))
    rooflab_mode: Mapped[str | None] = mapped_column(String(200))
    method_differences: Mapped[list[str]] = mapped_column(JSON, server_default=text("'[]'"))
    in_mode_median_ms: Mapped[float | None]
    in_mode_spread: Mapped[float | None]
    in_mode_ratio: Mapped[float | None]  # in_mode_median_ms / peer_median_ms: the engine's agreement
    in_mode_rounds_ms: Mapped[list[float]] = mapped_column(JSON, server_default=text("'[]'"))


class Collective(Base):
    """The group a collective measurement ran in (revision 0008): each rank's own median over the
    measurement's samples (those are the ranks' mean in `stream` mode, the slowest rank's in
    `isolated` mode: the measurement's `collective_mode`), where each rank ran, and the communication
    library's version and settings. `ranks` (the world size) is the measurement's column."""

    __tablename__ = "collectives"

    measurement_id: Mapped[int] = mapped_column(
        BigIntKey, ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True
    )
    rank_medians_ms: Mapped[list[float]] = mapped_column(JSON)
    rank_devices: Mapped[list[str]]
    comm_version: Mapped[str | None] = mapped_column(String(64))
    comm_settings: Mapped[dict[str, Any]]


class LayerProfile(Base):
    """The profiled execution of a measured block (revision 0005): its whole and what no part
    accounts for; sum(parts) + unattributed_ms + gap_ms - overlap_ms = whole_ms."""

    __tablename__ = "layer_profiles"

    measurement_id: Mapped[int] = mapped_column(
        BigIntKey, ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True
    )
    clock: Mapped[str] = mapped_column(String(32))
    whole_ms: Mapped[float]
    gap_ms: Mapped[float]
    unattributed_ms: Mapped[float]
    overlap_ms: Mapped[float]
    host_ms: Mapped[float]
    events: Mapped[int]


class LayerPart(Base):
    """One part of a profiled block (revision 0005), with the op library's model of its work."""

    __tablename__ = "layer_parts"
    __table_args__ = (UniqueConstraint("measurement_id", "position", name="uq_layer_parts_position"),)

    id: Mapped[int] = mapped_column(BigIntKey, primary_key=True)
    measurement_id: Mapped[int] = mapped_column(BigIntKey, ForeignKey("measurements.id", ondelete="CASCADE"))
    position: Mapped[int]
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    time_ms: Mapped[float]
    flops: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    events: Mapped[int]


class CounterReading(Base):
    """One case's profiled pass under Nsight Compute (revision 0007): what the hardware
    counted in the kernels of one timed call, beside the op's model of that call.

    `run_id` is the counters pass's own run; `checked_run_id` with the case, cache, timing mode and
    device_key names the measurement it checks (that measurement's own key; NULL when the database
    held no measurement of the case on that device, or that run was deleted). Counts are None where
    the metric was not reported (`missing_metrics`), never 0; `metric_values` holds every metric
    summed over the call's kernels, in base units (bytes, nanoseconds, instructions)."""

    __tablename__ = "counter_readings"
    __table_args__ = (
        UniqueConstraint(
            "run_id", "case_id", "cache", "timing_mode", "device_key", name="uq_counter_readings_run_case_device"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    case_id: Mapped[int] = mapped_column(ForeignKey("cases.id"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    device_key: Mapped[str] = mapped_column(String(128))
    cache: Mapped[str] = mapped_column(String(16))
    timing_mode: Mapped[str] = mapped_column(String(16))
    checked_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    measured_at: Mapped[datetime]
    ncu_version: Mapped[str | None] = mapped_column(String(64))
    metrics: Mapped[list[str]]
    missing_metrics: Mapped[list[str]]
    metric_values: Mapped[dict[str, Any]]
    kernels: Mapped[int | None]
    kernel_ms: Mapped[float | None]
    dram_read_bytes: Mapped[int | None] = mapped_column(BigInteger)
    dram_write_bytes: Mapped[int | None] = mapped_column(BigInteger)
    l2_traffic_bytes: Mapped[int | None] = mapped_column(BigInteger)
    fp64_flops: Mapped[int | None] = mapped_column(BigInteger)
    fp32_flops: Mapped[int | None] = mapped_column(BigInteger)
    fp16_flops: Mapped[int | None] = mapped_column(BigInteger)
    tensor_instructions: Mapped[int | None] = mapped_column(BigInteger)
    model_flops: Mapped[int] = mapped_column(BigInteger)
    model_bytes: Mapped[int] = mapped_column(BigInteger)
    # revision 0011: the model's split (NULL: stored before it, or an op without one), and the write-back
    # caught inside the profiled range by a sweep (NULL: stored before it) with the sweep's own writes
    model_bytes_read: Mapped[int | None] = mapped_column(BigInteger)
    model_bytes_written: Mapped[int | None] = mapped_column(BigInteger)
    caught_write_back_bytes: Mapped[int | None] = mapped_column(BigInteger)
    sweep_own_write_bytes: Mapped[int | None] = mapped_column(BigInteger)


class ResultWrite(Base):
    """One statement that wrote, changed or deleted results of a run, as PostgreSQL's triggers on
    `measurements` record it (db.result_writes; revision 0013). `writes` counts the statements a
    compacted row stands for. No foreign key: a deleted run's writes are recorded too."""

    __tablename__ = "result_writes"

    id: Mapped[int] = mapped_column(BigIntKey, primary_key=True)
    run_id: Mapped[int] = mapped_column(index=True)  # runs.id
    writes: Mapped[int] = mapped_column(server_default=text("1"))


class SeriesStateRun(Base):
    """A run folded into the per-series state of one kind (db.series_state; revision 0013), with
    its count of journal writes (result_writes) when it was: the state holds while they agree."""

    __tablename__ = "series_state_runs"

    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[int] = mapped_column(primary_key=True)  # runs.id (no foreign key: a deletion is seen)
    writes: Mapped[int]


class SeriesState(Base):
    """The whole-history facts of one series (db.series_facts; revision 0013) over the runs folded
    in: `series_key` the JSON array of the series' parts and ways (the kind's), the number of runs
    with an ok result, and the first and last start of those runs."""

    __tablename__ = "series_state"
    __table_args__ = (UniqueConstraint("kind", "case_id", "series_key", name="uq_series_state_key"),)

    id: Mapped[int] = mapped_column(BigIntKey, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    case_id: Mapped[int]  # cases.id
    series_key: Mapped[str] = mapped_column(Text)
    n_ok_runs: Mapped[int]
    first_ok_start: Mapped[datetime | None]
    last_ok_start: Mapped[datetime | None]


@event.listens_for(Base.metadata, "after_create")
def _journal_triggers(_target: MetaData, connection: Connection, **_kw: Any) -> None:
    """A database created from the models gets the journal's triggers as revision 0013 makes them."""
    result_writes.install(connection)
