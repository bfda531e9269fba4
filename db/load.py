"""Bulk loading of whole runs into a database in one transaction (used by import and merge).

Everything that already exists is kept as it is: runs by run_id, environments by fingerprint,
cases by case_key, measurements by (run, case, cache, timing mode, device), cross-checks by that
key and their peer, counter readings by that key, and layer profiles by their measurement. Loading the same batch twice
therefore adds nothing.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Column, Connection, Table, select, update

from rooflab.db import models
from rooflab.db.bulk_rows import insert_rows
from rooflab.db.dialect import insert_ignore
from rooflab.db.shards import aggregate_shards
from rooflab.vocab import RunStatus

CHUNK = 2000
T = TypeVar("T")


@dataclass
class Batch:
    """Rows to load, keyed by their natural identities (foreign keys are resolved by `load`)."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # run_id -> runs columns
    shards: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (run_id, run_shards columns)
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)  # fingerprint -> columns
    run_environments: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)  # case_key -> columns
    # (run_id, case_key, fingerprint, measurements columns incl. device_key, samples (count, blob) or None)
    measurements: list[tuple[str, str, str, dict[str, Any], tuple[int, bytes] | None]] = field(default_factory=list)
    # (run_id, case_key, fingerprint, crosschecks columns incl. device_key, cache, timing_mode, peer)
    crosschecks: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)
    layer_profiles: list[LayerProfileRows] = field(default_factory=list)
    counters: list[CounterRows] = field(default_factory=list)
    collectives: list[AttachedRow] = field(default_factory=list)


@dataclass(frozen=True)
class CounterRows:
    """One counter reading, named by natural keys: its run, case and device, and the run of the
    measurement it checks (None: none), which the target must hold for the link to be kept."""

    run_id: str
    case_key: str
    fingerprint: str
    checked_run_id: str | None
    columns: dict[str, Any]  # counter_readings columns but the ids


@dataclass(frozen=True)
class AttachedRow:
    """A row of a table keyed by its measurement (`collectives`), named by the measurement's natural
    key; `measured_at` tells that a target's measurement of that key is the very one it belongs to."""

    run_id: str
    case_key: str
    cache: str
    timing_mode: str
    device_key: str
    measured_at: Any  # datetime
    row: dict[str, Any]  # the table's columns but measurement_id


@dataclass(frozen=True)
class LayerProfileRows:
    """A measurement's layer profile and parts, named by the measurement's natural key; `measured_at`
    tells that a target's measurement of that key is the very one profiled."""

    run_id: str
    case_key: str
    cache: str
    timing_mode: str
    device_key: str
    measured_at: Any  # datetime
    profile: dict[str, Any]  # layer_profiles columns but measurement_id
    parts: tuple[dict[str, Any], ...]  # layer_parts columns but id and measurement_id


@dataclass
class LoadCounts:
    runs: int = 0
    environments: int = 0
    cases: int = 0
    measurements: int = 0
    samples: int = 0
    skipped: int = 0  # measurements already present
    crosschecks: int = 0
    layer_profiles: int = 0
    counters: int = 0
    collectives: int = 0

    def add(self, other: LoadCounts) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _chunks(items: list[T], size: int = CHUNK) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _ids(conn: Connection, column: Any, key_column: Any, keys: Iterable[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for chunk in _chunks(sorted(set(keys)), 500):
        for key, pk in conn.execute(select(key_column, column).where(key_column.in_(chunk))):
            found[key] = pk
    return found


def insert_missing(conn: Connection, table: Table, key_column: Column[str],
                   rows: Mapping[str, Mapping[str, object]]) -> tuple[dict[str, int], int]:
    """The ids of `rows` (keyed by their natural key, `key_column`), inserting those the database lacks
    in batches; and how many were new."""
    existing = _ids(conn, table.c.id, key_column, rows)
    new = [dict(rows[key]) for key in rows if key not in existing]
    for chunk in _chunks(new):
        conn.execute(insert_ignore(conn, table), chunk)
    ids = _ids(conn, table.c.id, key_column, rows) if new else existing
    return ids, len(new)


def _merge_run_states(conn: Connection, batch: Batch, run_ids: dict[str, int]) -> None:
    """Shards and runs that the target still sees running but the batch saw finish take the batch's state."""
    shard_t, run_t = models.RunShard.__table__, models.Run.__table__
    if batch.shards:
        shard_rows = [dict(row, run_id=run_ids[run_id]) for run_id, row in batch.shards]
        conn.execute(insert_ignore(conn, shard_t), shard_rows)
        for row in shard_rows:
            if row["status"] != RunStatus.RUNNING:
                conn.execute(
                    update(shard_t)
                    .where(shard_t.c.run_id == row["run_id"], shard_t.c.shard == row["shard"],
                           shard_t.c.status == RunStatus.RUNNING)
                    .values(status=row["status"], finished_at=row["finished_at"])
                )
    sharded = {run_id for run_id, _ in batch.shards}
    for run_id in sorted(sharded):  # as in ResultStore.finish_run: see concurrent shard updates
        conn.execute(select(run_t.c.id).where(run_t.c.id == run_ids[run_id]).with_for_update())
    for run_id, row in batch.runs.items():
        if run_id in sharded:
            aggregate_shards(conn, run_ids[run_id])
        elif row["status"] != RunStatus.RUNNING:
            conn.execute(
                update(run_t)
                .where(run_t.c.id == run_ids[run_id], run_t.c.status == RunStatus.RUNNING)
                .values(status=row["status"], finished_at=row["finished_at"])
            )


def load(conn: Connection, batch: Batch) -> LoadCounts:
    """Insert what is missing from `batch`; the caller owns the transaction."""
    counts = LoadCounts()
    run_t, env_t, case_t = models.Run.__table__, models.Environment.__table__, models.Case.__table__
    run_ids, counts.runs = insert_missing(conn, run_t, run_t.c.run_id, batch.runs)
    env_ids, counts.environments = insert_missing(conn, env_t, env_t.c.device_fingerprint, batch.environments)
    case_ids, counts.cases = insert_missing(conn, case_t, case_t.c.case_key, batch.cases)

    _merge_run_states(conn, batch, run_ids)
    if batch.run_environments:
        env_rows = [
            dict(row, run_id=run_ids[run_id], environment_id=env_ids[fingerprint], device_key=key)
            for (run_id, fingerprint, key), row in batch.run_environments.items()
        ]
        for chunk in _chunks(env_rows):
            conn.execute(insert_ignore(conn, models.RunEnvironment.__table__), chunk)

    m_t = models.Measurement.__table__
    run_pks = sorted({run_ids[run_id] for run_id, *_ in batch.measurements})
    existing: set[tuple[int, int, str, str, str]] = set()
    key_cols = (m_t.c.run_id, m_t.c.case_id, m_t.c.cache, m_t.c.timing_mode, m_t.c.device_key)
    for pks in _chunks(run_pks, 200):
        existing.update(tuple(row) for row in conn.execute(select(*key_cols).where(m_t.c.run_id.in_(pks))))

    rows: list[dict[str, Any]] = []
    samples: list[tuple[int, bytes] | None] = []
    for run_id, case_key, fingerprint, columns, sample in batch.measurements:
        row = dict(columns, run_id=run_ids[run_id], case_id=case_ids[case_key], environment_id=env_ids[fingerprint])
        key = (row["run_id"], row["case_id"], row["cache"], row["timing_mode"], row["device_key"])
        if key in existing:
            counts.skipped += 1
            continue
        existing.add(key)
        rows.append(row)
        samples.append(sample)

    for chunk in _chunks(rows, CHUNK * 5):
        insert_rows(conn, m_t, chunk)
    counts.measurements = len(rows)

    with_samples = [(row, sample) for row, sample in zip(rows, samples, strict=True) if sample is not None]
    if with_samples:
        # the new rows' ids, found by their natural key (plain executemany above returns none)
        ids: dict[tuple[int, int, str, str, str], int] = {}
        new_runs = sorted({row["run_id"] for row, _ in with_samples})
        for chunk in _chunks(new_runs, 200):
            for pk, *natural_key in conn.execute(select(m_t.c.id, *key_cols).where(m_t.c.run_id.in_(chunk))):
                ids[tuple(natural_key)] = pk
        sample_rows = [
            {"measurement_id": ids[(row["run_id"], row["case_id"], row["cache"], row["timing_mode"],
                                    row["device_key"])],
             "count": sample[0], "values_f64le": sample[1]}
            for row, sample in with_samples
        ]
        for chunk in _chunks(sample_rows, CHUNK * 5):
            insert_rows(conn, models.Sample.__table__, chunk)
        counts.samples = len(sample_rows)
    counts.crosschecks = _load_crosschecks(conn, batch, run_ids, case_ids, env_ids)
    counts.layer_profiles = _load_layer_profiles(conn, batch, run_ids, case_ids)
    counts.counters = _load_counters(conn, batch, run_ids, case_ids, env_ids)
    counts.collectives = _load_collectives(conn, batch, run_ids, case_ids)
    return counts


def _insert_new_rows(conn: Connection, table: Any, key_cols: tuple[Any, ...], rows: list[dict[str, Any]]) -> int:
    """Insert those of `rows` (their keys resolved to the target's ids) whose natural key
    `key_cols` the target lacks; returns how many."""
    existing: set[tuple[Any, ...]] = set()
    for chunk in _chunks(sorted({row["run_id"] for row in rows}), 200):
        existing.update(tuple(row) for row in conn.execute(select(*key_cols).where(table.c.run_id.in_(chunk))))
    new: list[dict[str, Any]] = []
    for row in rows:
        key = tuple(row[column.name] for column in key_cols)
        if key not in existing:
            existing.add(key)
            new.append(row)
    for row_chunk in _chunks(new):
        conn.execute(table.insert(), row_chunk)
    return len(new)


def _load_counters(conn: Connection, batch: Batch, run_ids: dict[str, int], case_ids: dict[str, int],
                   env_ids: dict[str, int]) -> int:
    """Insert the counter readings the target lacks, each linked to the target's copy of the run it
    checks; returns how many."""
    if not batch.counters:
        return 0
    k_t, run_t = models.CounterReading.__table__, models.Run.__table__
    key_cols = (k_t.c.run_id, k_t.c.case_id, k_t.c.cache, k_t.c.timing_mode, k_t.c.device_key)
    checked = _ids(conn, run_t.c.id, run_t.c.run_id, {c.checked_run_id for c in batch.counters if c.checked_run_id})
    rows = [dict(c.columns, run_id=run_ids[c.run_id], case_id=case_ids[c.case_key],
                 environment_id=env_ids[c.fingerprint],
                 checked_run_id=checked.get(c.checked_run_id) if c.checked_run_id else None) for c in batch.counters]
    return _insert_new_rows(conn, k_t, key_cols, rows)


def _load_crosschecks(conn: Connection, batch: Batch, run_ids: dict[str, int], case_ids: dict[str, int],
                      env_ids: dict[str, int]) -> int:
    """Insert the cross-check rows the target lacks; returns how many."""
    x_t = models.CrossCheck.__table__
    key_cols = (x_t.c.run_id, x_t.c.case_id, x_t.c.cache, x_t.c.timing_mode, x_t.c.device_key, x_t.c.peer)
    rows = [dict(columns, run_id=run_ids[run_id], case_id=case_ids[case_key], environment_id=env_ids[fingerprint])
            for run_id, case_key, fingerprint, columns in batch.crosschecks]
    return _insert_new_rows(conn, x_t, key_cols, rows)


def _load_layer_profiles(conn: Connection, batch: Batch, run_ids: dict[str, int], case_ids: dict[str, int]) -> int:
    """Attach each profile (with its parts) to the target's measurement of the same key and time
    when that measurement has no profile yet; returns how many were attached."""
    if not batch.layer_profiles:
        return 0
    m_t, lp_t, part_t = models.Measurement.__table__, models.LayerProfile.__table__, models.LayerPart.__table__
    key_cols = (m_t.c.run_id, m_t.c.case_id, m_t.c.cache, m_t.c.timing_mode, m_t.c.device_key)
    target: dict[tuple[Any, ...], tuple[int, Any, bool]] = {}  # key -> (id, measured_at, has a profile)
    query = select(m_t.c.id, m_t.c.measured_at, lp_t.c.measurement_id.is_not(None), *key_cols).select_from(
        m_t.outerjoin(lp_t, lp_t.c.measurement_id == m_t.c.id))
    for chunk in _chunks(sorted({run_ids[p.run_id] for p in batch.layer_profiles}), 200):
        for pk, measured_at, profiled, *key in conn.execute(query.where(m_t.c.run_id.in_(chunk))):
            target[tuple(key)] = (pk, measured_at, bool(profiled))
    profiles: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for p in batch.layer_profiles:
        found = target.get((run_ids[p.run_id], case_ids[p.case_key], p.cache, p.timing_mode, p.device_key))
        if found is None or found[2] or found[1] != p.measured_at:
            continue  # profiled already, or the target kept another measurement of that key
        profiles.append(dict(p.profile, measurement_id=found[0]))
        parts.extend(dict(part, measurement_id=found[0]) for part in p.parts)
    for profile_chunk in _chunks(profiles):
        conn.execute(lp_t.insert(), profile_chunk)
    for part_chunk in _chunks(parts):
        conn.execute(part_t.insert(), part_chunk)
    return len(profiles)


def _load_collectives(conn: Connection, batch: Batch, run_ids: dict[str, int], case_ids: dict[str, int]) -> int:
    """Attach each `collectives` row to the target's measurement of the same key and time when that
    measurement has none yet; returns how many were attached."""
    if not batch.collectives:
        return 0
    m_t, g_t = models.Measurement.__table__, models.Collective.__table__
    key_cols = (m_t.c.run_id, m_t.c.case_id, m_t.c.cache, m_t.c.timing_mode, m_t.c.device_key)
    target: dict[tuple[Any, ...], tuple[int, Any, bool]] = {}  # key -> (id, measured_at, has a row)
    query = select(m_t.c.id, m_t.c.measured_at, g_t.c.measurement_id.is_not(None), *key_cols).select_from(
        m_t.outerjoin(g_t, g_t.c.measurement_id == m_t.c.id))
    for chunk in _chunks(sorted({run_ids[g.run_id] for g in batch.collectives}), 200):
        for pk, measured_at, attached, *key in conn.execute(query.where(m_t.c.run_id.in_(chunk))):
            target[tuple(key)] = (pk, measured_at, bool(attached))
    rows = []
    for g in batch.collectives:
        found = target.get((run_ids[g.run_id], case_ids[g.case_key], g.cache, g.timing_mode, g.device_key))
        if found is not None and not found[2] and found[1] == g.measured_at:
            rows.append(dict(g.row, measurement_id=found[0]))
    for row_chunk in _chunks(rows):
        conn.execute(g_t.insert(), row_chunk)
    return len(rows)


__all__ = ["AttachedRow", "Batch", "CounterRows", "LayerProfileRows", "LoadCounts", "load"]
