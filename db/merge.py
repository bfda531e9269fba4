"""`rooflab db merge`: copy node-local databases (usually SQLite files) into a target database.

Everything travels: runs with their spec text, shards, devices with identity and per-run info,
cases, measurements and raw samples, cross-check rows, layer profiles with their parts,
hardware-counter readings, and the groups collectives ran in.
Each source is merged in one transaction; what the target
already has is kept, so merging the same file again adds nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from rooflab.db import models
from rooflab.db.engine import make_engine, retry_locked
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import open_for_writing
from rooflab.db.load import AttachedRow, Batch, CounterRows, LayerProfileRows, LoadCounts, load
from rooflab.db.schema import require_current
from rooflab.db.urls import normalize_url, redact, sqlite_path

# a run, a device and a case travel whole: every column of their tables but the target's own key
_RUN_COLUMNS, _ENV_COLUMNS, _CASE_COLUMNS = (tuple(c.name for c in model.__table__.columns if c.name != "id")
                                             for model in (models.Run, models.Environment, models.Case))
_SKIP_MEASUREMENT = {"id", "run_id", "case_id", "environment_id"}
_SKIP_CROSSCHECK = {"id", "run_id", "case_id", "environment_id"}
_SKIP_COUNTERS = {"id", "run_id", "case_id", "environment_id", "checked_run_id"}


@dataclass(frozen=True)
class MergeResult:
    source: str  # redacted
    runs_seen: int
    counts: LoadCounts


def source_url(source: str) -> str:
    """A merge source: a SQLite file path, or any database URL."""
    if "://" in source:
        return source
    path = Path(source)
    if not path.is_file():
        raise DatabaseInputError(f"merge source {source}: no such file")
    return f"sqlite:///{path.resolve()}"


def _run_batch(conn: Connection, run: Any) -> Batch:
    """Everything the source holds of one run, as a Batch for db.load: the run and its shards, its
    devices and cases, its measurements with their samples, cross-checks and counter readings, and
    what hangs off its measurements (layer profiles, collectives' groups)."""
    batch = Batch()
    batch.runs[run.run_id] = {name: getattr(run, name) for name in _RUN_COLUMNS}
    s_t = models.RunShard.__table__
    for row in conn.execute(select(s_t).where(s_t.c.run_id == run.id)):
        batch.shards.append((run.run_id, {k: v for k, v in row._mapping.items() if k not in ("id", "run_id")}))
    env_fp = _environments(conn, run, batch)
    case_key = _cases(conn, run, batch)
    measurement_key = _measurements(conn, run, batch, case_key, env_fp)
    _crosschecks_and_counters(conn, run, batch, case_key, env_fp)
    _attached(conn, run, batch, measurement_key)
    return batch


def _environments(conn: Connection, run: Any, batch: Batch) -> dict[int, str]:
    """The devices the run used (by its measurements, device rows, cross-checks or counter readings)
    into `batch`; returns environment id -> fingerprint."""
    e_t, re_t, m_t = models.Environment.__table__, models.RunEnvironment.__table__, models.Measurement.__table__
    x_t, k_t = models.CrossCheck.__table__, models.CounterReading.__table__
    env_fp: dict[int, str] = {}
    for env in conn.execute(
        select(e_t).where(e_t.c.id.in_(select(m_t.c.environment_id).where(m_t.c.run_id == run.id).union(
            select(re_t.c.environment_id).where(re_t.c.run_id == run.id),
            select(x_t.c.environment_id).where(x_t.c.run_id == run.id),
            select(k_t.c.environment_id).where(k_t.c.run_id == run.id))))
    ):
        env_fp[env.id] = env.device_fingerprint
        batch.environments[env.device_fingerprint] = {name: getattr(env, name) for name in _ENV_COLUMNS}
    for row in conn.execute(select(re_t).where(re_t.c.run_id == run.id)):
        batch.run_environments[(run.run_id, env_fp[row.environment_id], row.device_key)] = {
            "device_uuid": row.device_uuid, "info": row.info,
        }
    return env_fp


def _cases(conn: Connection, run: Any, batch: Batch) -> dict[int, str]:
    """The cases the run measured, cross-checked or counted into `batch`; returns case id -> case key."""
    c_t, m_t = models.Case.__table__, models.Measurement.__table__
    x_t, k_t = models.CrossCheck.__table__, models.CounterReading.__table__
    case_key: dict[int, str] = {}
    for case in conn.execute(select(c_t).where(c_t.c.id.in_(select(m_t.c.case_id).where(m_t.c.run_id == run.id).union(
            select(x_t.c.case_id).where(x_t.c.run_id == run.id),
            select(k_t.c.case_id).where(k_t.c.run_id == run.id))))):
        case_key[case.id] = case.case_key
        batch.cases[case.case_key] = {name: getattr(case, name) for name in _CASE_COLUMNS}
    return case_key


def _measurements(conn: Connection, run: Any, batch: Batch, case_key: dict[int, str],
                  env_fp: dict[int, str]) -> dict[int, tuple[str, str, str, str, Any]]:
    """The run's measurements with their raw samples into `batch`; returns measurement id -> the
    key that finds it again in the target (case key, cache, timing mode, device, measured at)."""
    m_t, sm_t = models.Measurement.__table__, models.Sample.__table__
    query = (
        select(m_t, sm_t.c.count.label("_sample_count"), sm_t.c.values_f64le.label("_sample_blob"))
        .select_from(m_t.outerjoin(sm_t, sm_t.c.measurement_id == m_t.c.id))
        .where(m_t.c.run_id == run.id)
        .order_by(m_t.c.id)
    )
    measurement_key: dict[int, tuple[str, str, str, str, Any]] = {}
    for row in conn.execute(query):
        mapping = row._mapping
        measurement_key[mapping["id"]] = (case_key[mapping["case_id"]], mapping["cache"], mapping["timing_mode"],
                                          mapping["device_key"], mapping["measured_at"])
        columns = {k: v for k, v in mapping.items() if k not in _SKIP_MEASUREMENT and not k.startswith("_sample")}
        blob = mapping["_sample_blob"]
        sample = (mapping["_sample_count"], bytes(blob)) if blob is not None else None
        batch.measurements.append(
            (run.run_id, case_key[mapping["case_id"]], env_fp[mapping["environment_id"]], columns, sample)
        )
    return measurement_key


def _crosschecks_and_counters(conn: Connection, run: Any, batch: Batch, case_key: dict[int, str],
                              env_fp: dict[int, str]) -> None:
    """The run's cross-check rows and counter readings (with the run each reading checked) into `batch`."""
    x_t, k_t, run_t = models.CrossCheck.__table__, models.CounterReading.__table__, models.Run.__table__
    for row in conn.execute(select(x_t).where(x_t.c.run_id == run.id).order_by(x_t.c.id)):
        mapping = row._mapping
        columns = {k: v for k, v in mapping.items() if k not in _SKIP_CROSSCHECK}
        batch.crosschecks.append((run.run_id, case_key[mapping["case_id"]], env_fp[mapping["environment_id"]], columns))
    checked = run_t.alias("checked")
    for row in conn.execute(select(k_t, checked.c.run_id.label("_checked_run"))
                            .select_from(k_t.outerjoin(checked, checked.c.id == k_t.c.checked_run_id))
                            .where(k_t.c.run_id == run.id).order_by(k_t.c.id)):
        mapping = row._mapping
        columns = {k: v for k, v in mapping.items() if k not in _SKIP_COUNTERS and not k.startswith("_")}
        batch.counters.append(CounterRows(run.run_id, case_key[mapping["case_id"]], env_fp[mapping["environment_id"]],
                                          mapping["_checked_run"], columns))


def _attached(conn: Connection, run: Any, batch: Batch,
              measurement_key: dict[int, tuple[str, str, str, str, Any]]) -> None:
    """What hangs off the run's measurements into `batch`: layer profiles with their parts, and the
    groups collectives ran in."""
    m_t, lp_t, part_t = models.Measurement.__table__, models.LayerProfile.__table__, models.LayerPart.__table__
    run_measurements = select(m_t.c.id).where(m_t.c.run_id == run.id)
    parts: dict[int, list[dict[str, Any]]] = {}
    for row in conn.execute(
        select(part_t).where(part_t.c.measurement_id.in_(run_measurements)).order_by(part_t.c.measurement_id,
                                                                                     part_t.c.position)
    ):
        parts.setdefault(row.measurement_id, []).append(
            {k: v for k, v in row._mapping.items() if k not in ("id", "measurement_id")})
    for row in conn.execute(select(lp_t).where(lp_t.c.measurement_id.in_(run_measurements))
                            .order_by(lp_t.c.measurement_id)):
        key, cache, timing_mode, device, measured_at = measurement_key[row.measurement_id]
        batch.layer_profiles.append(LayerProfileRows(
            run.run_id, key, cache, timing_mode, device, measured_at,
            {k: v for k, v in row._mapping.items() if k != "measurement_id"}, tuple(parts.get(row.measurement_id, ())),
        ))
    g_t = models.Collective.__table__
    for row in conn.execute(select(g_t).where(g_t.c.measurement_id.in_(run_measurements))
                            .order_by(g_t.c.measurement_id)):
        key, cache, timing_mode, device, measured_at = measurement_key[row.measurement_id]
        batch.collectives.append(AttachedRow(run.run_id, key, cache, timing_mode, device, measured_at,
                                             {k: v for k, v in row._mapping.items() if k != "measurement_id"}))


def merge(target_url: str, sources: list[str]) -> list[MergeResult]:
    """Merge each source into `target_url` (created at head if new); returns what each added."""
    target = normalize_url(target_url)
    target_path = sqlite_path(target)
    prepared = []
    for source in sources:
        url = normalize_url(source_url(source))
        path = sqlite_path(url)
        if target_path is not None and path is not None and path.resolve() == target_path.resolve():
            raise DatabaseInputError(f"merge source {source} is the target database itself")
        prepared.append(require_current(url))
    engine = open_for_writing(target)
    results: list[MergeResult] = []
    try:
        for url in prepared:
            src_engine = make_engine(url, write=False)
            try:
                with src_engine.connect() as src:
                    runs = src.execute(select(models.Run.__table__).order_by(models.Run.id)).all()
                    batches = [_run_batch(src, run) for run in runs]
            finally:
                src_engine.dispose()

            def run_all(batches: list[Batch] = batches) -> LoadCounts:  # this iteration's batches
                total = LoadCounts()
                with engine.begin() as conn:
                    for batch in batches:
                        total.add(load(conn, batch))
                return total

            results.append(MergeResult(redact(url), len(runs), retry_locked(run_all)))
    finally:
        engine.dispose()
    return results
