"""Bulk loading of whole runs into a database in one transaction (used by import and merge).

Everything that already exists is kept as it is: runs by run_id, environments by fingerprint,
cases by case_key, and measurements by (run, case, cache, timing mode, device). Loading the same
batch twice therefore adds nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, TypeVar

from sqlalchemy import Connection, select, update

from rooflab.db import models
from rooflab.db.dialect import insert_ignore
from rooflab.db.status import RunStatus

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


@dataclass
class LoadCounts:
    runs: int = 0
    environments: int = 0
    cases: int = 0
    measurements: int = 0
    samples: int = 0
    skipped: int = 0  # measurements already present

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


def _insert_missing(conn: Connection, table: Any, key_column: Any, rows: dict[str, dict[str, Any]]) -> tuple[dict[str, int], int]:
    existing = _ids(conn, table.c.id, key_column, rows)
    new = [rows[key] for key in rows if key not in existing]
    for chunk in _chunks(new):
        conn.execute(insert_ignore(conn, table), chunk)
    ids = _ids(conn, table.c.id, key_column, rows) if new else existing
    return ids, len(new)


def _merge_run_states(conn: Connection, batch: Batch, run_ids: dict[str, int]) -> None:
    """Shards and runs that the target still sees running but the batch saw finish take the batch's state."""
    from rooflab.db.store import aggregate_shards

    shard_t, run_t = models.RunShard.__table__, models.Run.__table__
    if batch.shards:
        shard_rows = [dict(row, run_id=run_ids[run_id]) for run_id, row in batch.shards]
        conn.execute(insert_ignore(conn, shard_t), shard_rows)
        for row in shard_rows:
            if row["status"] != RunStatus.RUNNING:
                conn.execute(
                    update(shard_t)
                    .where(shard_t.c.run_id == row["run_id"], shard_t.c.shard == row["shard"], shard_t.c.status == RunStatus.RUNNING)
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
    run_ids, counts.runs = _insert_missing(conn, run_t, run_t.c.run_id, batch.runs)
    env_ids, counts.environments = _insert_missing(conn, env_t, env_t.c.device_fingerprint, batch.environments)
    case_ids, counts.cases = _insert_missing(conn, case_t, case_t.c.case_key, batch.cases)

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
    for chunk in _chunks(run_pks, 200):
        existing.update(tuple(row) for row in conn.execute(select(*key_cols).where(m_t.c.run_id.in_(chunk))))

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
        conn.execute(m_t.insert(), chunk)
    counts.measurements = len(rows)

    with_samples = [(row, sample) for row, sample in zip(rows, samples) if sample is not None]
    if with_samples:
        # the new rows' ids, found by their natural key (plain executemany above returns none)
        ids: dict[tuple[int, int, str, str, str], int] = {}
        new_runs = sorted({row["run_id"] for row, _ in with_samples})
        for chunk in _chunks(new_runs, 200):
            for pk, *key in conn.execute(select(m_t.c.id, *key_cols).where(m_t.c.run_id.in_(chunk))):
                ids[tuple(key)] = pk  # type: ignore[index]
        sample_rows = [
            {"measurement_id": ids[(row["run_id"], row["case_id"], row["cache"], row["timing_mode"], row["device_key"])],
             "count": sample[0], "values_f64le": sample[1]}
            for row, sample in with_samples
        ]
        for chunk in _chunks(sample_rows, CHUNK * 5):
            conn.execute(models.Sample.__table__.insert(), chunk)
        counts.samples = len(sample_rows)
    return counts


__all__ = ["Batch", "LoadCounts", "load"]
