"""`rooflab db prune`: drop raw samples of old runs, keep every summary row.

Age is measured by the run's start, so a run is pruned as a whole. On SQLite the freed pages are
reused by later writes; `vacuum=True` also shrinks the file.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select

from rooflab.db import models
from rooflab.db.engine import retry_locked
from rooflab.db.handle import open_for_writing
from rooflab.db.urls import normalize_url


@dataclass(frozen=True)
class PruneResult:
    cutoff: datetime
    runs: int  # runs whose samples were (or would be) removed
    measurements: int  # sample rows removed
    sample_values: int  # float64 values removed
    bytes: int  # blob bytes removed
    dry_run: bool
    vacuumed: bool
    run_ids: tuple[str, ...] = ()  # the runs concerned, oldest first


def prune_samples(url: str, older_than: timedelta, *, dry_run: bool = False, vacuum: bool = False,
                  now: datetime | None = None) -> PruneResult:
    """Remove the raw samples of measurements whose run started more than `older_than` ago."""
    cutoff = (now or datetime.now(UTC)) - older_than
    parsed = normalize_url(url)
    engine = open_for_writing(parsed)
    m, r, s = models.Measurement, models.Run, models.Sample
    old_ids = select(m.id).join(r, r.id == m.run_id).where(r.started_at < cutoff)
    summary = (
        select(func.count(func.distinct(m.run_id)), func.count(s.measurement_id), func.coalesce(func.sum(s.count), 0),
               func.coalesce(func.sum(func.length(s.values_f64le)), 0))
        .select_from(s)
        .join(m, m.id == s.measurement_id)
        .join(r, r.id == m.run_id)
        .where(r.started_at < cutoff)
    )
    run_names = (
        select(r.run_id)
        .where(r.started_at < cutoff, r.id.in_(select(m.run_id).join(s, s.measurement_id == m.id)))
        .order_by(r.started_at, r.run_id)
    )
    try:
        def body() -> tuple[int, int, int, int, tuple[str, ...]]:
            with engine.begin() as conn:
                runs, rows, values, nbytes = conn.execute(summary).one()
                run_ids = tuple(conn.scalars(run_names)) if rows else ()
                if not dry_run and rows:
                    conn.execute(delete(s).where(s.measurement_id.in_(old_ids)))
                return int(runs), int(rows), int(values), int(nbytes), run_ids

        runs, rows, values, nbytes, run_ids = retry_locked(body)
        vacuumed = False
        if vacuum and not dry_run and parsed.get_backend_name() == "sqlite":
            raw = engine.raw_connection()
            try:
                driver = raw.driver_connection
                if driver is None:  # only a closed pool connection has none
                    raise RuntimeError("the connection closed before VACUUM")
                driver.execute("VACUUM")
                vacuumed = True
            finally:
                raw.close()
    finally:
        engine.dispose()
    return PruneResult(cutoff, runs, rows, values, nbytes, dry_run, vacuumed, run_ids)
