"""`ResultStore`: how a runner writes results. One transaction per measured case, committed at once.

Opening a store creates a new database at the schema head, refuses a database written by a newer
rooflab, and asks for `rooflab db upgrade` on an older one. Several processes (shards) may write
one SQLite file or one PostgreSQL database at the same time: inserts that would duplicate a
result are skipped by the database's unique constraints, never by a read-then-write race.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar, cast

from sqlalchemy import Connection, select, update

from rooflab.db import models
from rooflab.db.bulk_rows import insert_new, insert_rows
from rooflab.db.collectives import add_collective
from rooflab.db.dialect import NATURAL_KEYS, insert_ignore
from rooflab.db.engine import retry_locked
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import Database, as_database
from rooflab.db.load import insert_missing
from rooflab.db.measurement_columns import device_key, measurement_row
from rooflab.db.samples import pack
from rooflab.db.shards import ShardStatus, aggregate_shards, parse_shard
from rooflab.db.urls import redact
from rooflab.record import CaseRecord, EnvironmentRecord, LayerProfileRecord, MeasurementRecord, RunRecord
from rooflab.vocab import ResultStatus, RunStatus, allowed

T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


def require_aware(name: str, value: datetime) -> None:
    """Refuse naive timestamps: everything is stored as timezone-aware UTC."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise DatabaseInputError(f"{name} {value!r} must be a timezone-aware datetime (UTC)")


def environment_device_uuid(env: EnvironmentRecord) -> str | None:
    for key in ("device_uuid", "uuid"):
        value = env.info.get(key) if env.info else None
        if value:
            return str(value)
    return None


class ResultStore:
    """Writes runs, environments and measurements to the database at `url`.

    Example:
        store = ResultStore("sqlite:///results.db")
        store.start_run(run)
        store.add_environment(run.run_id, env)
        store.add_measurement(measurement)   # False if this run already has that result
        store.finish_run(run.run_id, RunStatus.COMPLETE)
        store.close()
    """

    def __init__(self, url: str | Database) -> None:
        """`url`: a database URL (the store opens and closes its own engine), or the command's
        db.handle.Database (the store writes through its engine; closing it is the owner's)."""
        self.database, self._owns_database = as_database(url)
        self.url = self.database.url
        try:
            self.engine = self.database.writer()
        except BaseException:
            if self._owns_database:
                self.database.close()
            raise
        self._run_pk: dict[str, int] = {}
        self._env_pk: dict[str, int] = {}
        self._case_pk: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"ResultStore({redact(self.url)!r})"

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_database:
            self.database.close()

    # -- transactions -------------------------------------------------------------------------

    def transaction(self, body: Callable[[Connection], T]) -> T:
        """`body(conn)` in one transaction, retried while SQLite is locked by another writer."""
        def attempt() -> T:
            with self.engine.begin() as conn:
                return body(conn)

        return retry_locked(attempt)

    def _run_pk_in(self, conn: Connection, run_id: str) -> int:
        pk = self._run_pk.get(run_id)
        if pk is None:
            pk = conn.scalar(select(models.Run.id).where(models.Run.run_id == run_id))
            if pk is None:
                raise DatabaseInputError(f"run {run_id!r} is not in the database: call start_run first")
        return pk

    # -- runs ---------------------------------------------------------------------------------

    def start_run(self, run: RunRecord, shard: str | None = None) -> None:
        """Record a run (idempotent: every shard of a run, and a resumed run, call it again)."""
        require_aware("started_at", run.started_at)
        if shard is not None:
            _, shard_count = parse_shard(shard)

        def body(conn: Connection) -> int:
            conn.execute(
                insert_ignore(conn, models.Run.__table__).values(
                    run_id=run.run_id,
                    suite=run.suite,
                    spec_text=run.spec_text,
                    spec_hash=run.spec_hash,
                    started_at=run.started_at,
                    finished_at=None,
                    status=RunStatus.RUNNING,
                    host=run.host,
                    git_commit=run.git_commit,
                    git_dirty=bool(run.git_dirty),
                    command_line=run.command_line,
                    rooflab_version=run.rooflab_version,
                )
            )
            row = conn.execute(
                select(models.Run.id, models.Run.spec_hash).where(models.Run.run_id == run.run_id)
            ).one()
            if row.spec_hash != run.spec_hash:
                raise DatabaseInputError(
                    f"run {run.run_id!r} already exists with a different spec (sha256 {row.spec_hash[:12]}..., "
                    f"now {run.spec_hash[:12]}...); use a new run id"
                )
            if shard is None:
                conn.execute(
                    update(models.Run).where(models.Run.id == row.id).values(status=RunStatus.RUNNING, finished_at=None)
                )
            else:
                table = models.RunShard.__table__
                conn.execute(
                    insert_ignore(conn, table).values(
                        run_id=row.id, shard=shard, shard_count=shard_count, host=run.host,
                        status=RunStatus.RUNNING, started_at=utc_now(), finished_at=None,
                    )
                )
                conn.execute(
                    update(models.RunShard)
                    .where(models.RunShard.run_id == row.id, models.RunShard.shard == shard)
                    .values(status=RunStatus.RUNNING, finished_at=None, host=run.host)
                )
                conn.execute(
                    update(models.Run).where(models.Run.id == row.id).values(status=RunStatus.RUNNING, finished_at=None)
                )
            return row.id

        self._run_pk[run.run_id] = self.transaction(body)

    def finish_run(self, run_id: str, status: str, shard: str | None = None) -> None:
        """Mark a run (or one shard of it) finished with a RunStatus.

        A sharded run is finished when all N of its shards are; its status is then the worst of
        theirs (complete < partial < interrupted < failed).
        """
        if status not in tuple(RunStatus):
            raise DatabaseInputError(f"invalid run status {status!r}; allowed: {allowed(RunStatus)}")
        if shard is not None:
            parse_shard(shard)
        now = utc_now()

        def body(conn: Connection) -> None:
            pk = self._run_pk_in(conn, run_id)
            # shards finishing at the same moment must see each other's state (PostgreSQL row lock;
            # SQLite writers are serialised by BEGIN IMMEDIATE already)
            conn.execute(select(models.Run.id).where(models.Run.id == pk).with_for_update())
            if shard is None:
                conn.execute(update(models.Run).where(models.Run.id == pk).values(status=status, finished_at=now))
                return
            done = conn.execute(
                update(models.RunShard)
                .where(models.RunShard.run_id == pk, models.RunShard.shard == shard)
                .values(status=status, finished_at=now)
            )
            if done.rowcount == 0:
                raise DatabaseInputError(f"shard {shard} of run {run_id!r} was never started")
            aggregate_shards(conn, pk)

        self.transaction(body)

    def run_shards(self, run_id: str) -> list[ShardStatus]:
        """The shards of a run that have started, in shard order."""
        shard_table = models.RunShard.__table__
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(shard_table)
                .join(models.Run.__table__, models.Run.id == shard_table.c.run_id)
                .where(models.Run.run_id == run_id)
            ).all()
        shards = [
            ShardStatus(
                shard=row.shard, shard_count=row.shard_count, host=row.host, status=row.status,
                started_at=row.started_at, finished_at=row.finished_at,
            )
            for row in rows
        ]
        return sorted(shards, key=lambda s: parse_shard(s.shard))

    def get_run(self, run_id: str) -> RunRecord | None:
        """The stored run (with its spec text, for `--resume`), or None."""
        with self.engine.connect() as conn:
            row = conn.execute(select(models.Run.__table__).where(models.Run.run_id == run_id)).first()
        if row is None:
            return None
        return RunRecord(
            run_id=row.run_id, suite=row.suite, spec_text=row.spec_text, spec_hash=row.spec_hash,
            started_at=row.started_at, host=row.host, command_line=row.command_line,
            git_commit=row.git_commit, git_dirty=bool(row.git_dirty), rooflab_version=row.rooflab_version,
        )

    def run_status(self, run_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.scalar(select(models.Run.status).where(models.Run.run_id == run_id))

    # -- environments ---------------------------------------------------------------------------

    def add_environment(self, run_id: str, env: EnvironmentRecord) -> None:
        """Record a device (deduplicated by fingerprint) and that this run used it (idempotent)."""
        uuid = environment_device_uuid(env)

        def body(conn: Connection) -> int:
            run_pk = self._run_pk_in(conn, run_id)
            env_pk = upsert_environment(conn, env, utc_now())
            conn.execute(
                insert_ignore(conn, models.RunEnvironment.__table__).values(
                    run_id=run_pk, environment_id=env_pk, device_key=device_key(uuid, env.device_fingerprint),
                    device_uuid=uuid, info=_jsonable(env.info),
                )
            )
            return env_pk

        self._env_pk[env.device_fingerprint] = self.transaction(body)

    # -- measurements ----------------------------------------------------------------------------

    def add_measurement(self, m: MeasurementRecord) -> bool:
        """Store one result with its raw samples in one transaction.

        Returns False, writing nothing, when the run already has a result for this case, cache
        mode, timing mode and device.
        """
        return self.add_measurements([m])[0]

    def add_measurements(self, records: Sequence[MeasurementRecord]) -> list[bool]:
        """Store results with their raw samples in one transaction, each table's rows in one batched
        INSERT (never a statement per row): what a run's supervisor holds for a moment, or a whole batch.

        Returns, per record, whether it was written: False where the run already had a result for its
        case, cache mode, timing mode and device, or an earlier record of `records` is that result.
        """
        for m in records:
            if m.status not in tuple(ResultStatus):
                raise DatabaseInputError(f"invalid status {m.status!r}; allowed: {allowed(ResultStatus)}")
            require_aware("measured_at", m.identity.measured_at)
        rows = [measurement_row(m) for m in records]
        if not rows:
            return []

        def body(conn: Connection) -> tuple[list[bool], dict[str, int], dict[str, int]]:
            run_pks = {run_id: self._run_pk_in(conn, run_id) for run_id in {m.identity.run_id for m in records}}
            env_pks = self._env_pks_in(conn, {m.identity.device_fingerprint for m in records})
            case_pks = self._case_pks_in(conn, [m.identity.case for m in records])
            params: list[dict[str, Any]] = []
            first: dict[tuple[Any, ...], int] = {}  # natural key -> the record that writes it
            for i, (m, row) in enumerate(zip(records, rows, strict=True)):
                run_pk = run_pks[m.identity.run_id]
                case_pk = case_pks[m.identity.case.case_key]
                key = (run_pk, case_pk, row["cache"], row["timing_mode"], row["device_key"])
                if key not in first:
                    first[key] = i
                    params.append(dict(run_id=run_pk, case_id=case_pk,
                                       environment_id=env_pks[m.identity.device_fingerprint], **row))
            table = models.Measurement.__table__
            new_ids: dict[tuple[Any, ...], int] = {
                tuple(row[1:]): cast(int, row[0]) for row in insert_new(conn, table, params, _MEASUREMENT_KEY,
                                                             ("id", *_MEASUREMENT_KEY))}
            new = {i: new_ids[key] for key, i in first.items() if key in new_ids}
            _add_attached(conn, [(pk, records[i]) for i, pk in new.items()])
            return [i in new for i in range(len(records))], env_pks, case_pks

        stored, env_pks, case_pks = self.transaction(body)
        self._env_pk.update(env_pks)
        self._case_pk.update(case_pks)
        return stored

    def _env_pks_in(self, conn: Connection, fingerprints: set[str]) -> dict[str, int]:
        """The environment ids of `fingerprints`; a device the database lacks is refused."""
        found = {fp: self._env_pk[fp] for fp in fingerprints if fp in self._env_pk}
        missing = sorted(fingerprints - set(found))
        if missing:
            env_t = models.Environment.__table__
            found.update(conn.execute(
                select(env_t.c.device_fingerprint, env_t.c.id).where(env_t.c.device_fingerprint.in_(missing))).all())
            for fp in missing:
                if fp not in found:
                    raise DatabaseInputError(f"device {fp!r} is not in the database: call add_environment first")
        return found

    def _case_pks_in(self, conn: Connection, cases: Sequence[CaseRecord]) -> dict[str, int]:
        """The case ids of `cases`, inserting those the database lacks (one batched INSERT)."""
        found = {c.case_key: self._case_pk[c.case_key] for c in cases if c.case_key in self._case_pk}
        missing = {c.case_key: case_row(c) for c in cases if c.case_key not in found}
        if missing:
            case_t = models.Case.__table__
            found.update(insert_missing(conn, case_t, case_t.c.case_key, missing)[0])
        return found

    def measured_case_keys(self, run_id: str, device_key: str | None = None) -> set[str]:
        """The case keys this run already has a result for.

        `device_key` limits them to one device, matched against the stored device key: the GPU's
        UUID, or the device fingerprint for a device without one (a CPU), as `device_key()` gives it.
        """
        query = (
            select(models.Case.case_key)
            .join(models.Measurement, models.Measurement.case_id == models.Case.id)
            .join(models.Run, models.Run.id == models.Measurement.run_id)
            .where(models.Run.run_id == run_id)
        )
        if device_key is not None:
            query = query.where(models.Measurement.device_key == device_key)
        with self.engine.connect() as conn:
            return set(conn.scalars(query))


_MEASUREMENT_KEY = NATURAL_KEYS["measurements"]


def _add_attached(conn: Connection, new: list[tuple[int, MeasurementRecord]]) -> None:
    """What hangs off new measurements (id, record): raw samples (one batched INSERT), a block's
    profile, a collective's group."""
    samples = [{"measurement_id": pk, "count": len(m.samples_ms), "values_f64le": pack(m.samples_ms)}
               for pk, m in new if m.samples_ms]
    insert_rows(conn, models.Sample.__table__, samples)
    for pk, m in new:
        if m.layer_profile is not None:
            add_layer_profile(conn, pk, m.layer_profile)
        if m.collective is not None:
            add_collective(conn, pk, m.collective)


def add_layer_profile(conn: Connection, measurement_pk: int, profile: LayerProfileRecord) -> None:
    """The profiled execution of a block and its parts, linked to their measurement."""
    fields = {name: getattr(profile, name) for name in (
        "clock", "whole_ms", "gap_ms", "unattributed_ms", "overlap_ms", "host_ms", "events")}
    conn.execute(models.LayerProfile.__table__.insert().values(measurement_id=measurement_pk, **fields))
    if profile.parts:
        conn.execute(
            models.LayerPart.__table__.insert(),
            [
                {"measurement_id": measurement_pk, "position": p.position, "name": p.name, "kind": p.kind,
                 "time_ms": p.time_ms, "flops": p.flops, "bytes": p.bytes, "events": p.events}
                for p in profile.parts
            ],
        )


def case_row(case: CaseRecord) -> dict[str, object]:
    """The `cases` columns of `case`."""
    return dict(case_key=case.case_key, op=case.op, op_version=int(case.op_version), family=case.family,
                backend=case.backend, dtype=case.dtype, params=_jsonable(case.params))


def upsert_case(conn: Connection, case: CaseRecord) -> int:
    """The id of `case`, inserting it if new."""
    conn.execute(insert_ignore(conn, models.Case.__table__).values(**case_row(case)))
    return conn.execute(select(models.Case.id).where(models.Case.case_key == case.case_key)).scalar_one()


def upsert_environment(conn: Connection, env: EnvironmentRecord, seen_at: datetime) -> int:
    """The id of `env`'s fingerprint, inserting the environment if new."""
    conn.execute(
        insert_ignore(conn, models.Environment.__table__).values(
            device_fingerprint=env.device_fingerprint, device_name=env.device_name, device_kind=env.device_kind,
            identity=_jsonable(env.identity), memory_bytes=int(env.memory_bytes), l2_bytes=int(env.l2_bytes),
            sm_count=int(env.sm_count), compute_capability=env.compute_capability,
            driver_version=env.driver_version, cuda_version=env.cuda_version, torch_version=env.torch_version,
            first_seen_at=seen_at,
        )
    )
    return conn.execute(
        select(models.Environment.id).where(models.Environment.device_fingerprint == env.device_fingerprint)
    ).scalar_one()


def _jsonable(value: Any) -> Any:
    """Mappings/tuples as plain dicts/lists (JSON columns need them)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
