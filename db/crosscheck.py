"""Cross-check results: one row per case, device and peer timer, linked to a run and its case.

`add_crosscheck` writes one row in one transaction (nothing when the run already holds it);
`crosscheck_frame` reads them back with the device and case columns a report needs.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd
from sqlalchemy import Connection, select

from rooflab.db import models
from rooflab.db.dialect import insert_ignore
from rooflab.db.engine import retry_locked
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import Db, reading
from rooflab.db.status import CHECK_STATUSES, allowed
from rooflab.db.store import ResultStore, device_key, require_aware, upsert_case


@dataclass(frozen=True)
class CrossCheckRecord:
    run_id: str
    case: Any  # suite.case.Case or db.records.CaseRecord: case_key, op, op_version, family, backend, dtype, params
    device_fingerprint: str
    device_uuid: str | None
    cache: str
    timing_mode: str
    peer: str
    peer_version: str | None
    status: str  # one of CHECK_STATUSES
    error: str | None
    peer_cache: str | None
    peer_clock: str | None
    rounds: int
    rooflab_median_ms: float | None
    rooflab_spread: float | None
    peer_median_ms: float | None
    peer_spread: float | None
    ratio: float | None
    disagrees: bool
    likely_reason: str | None
    rooflab_rounds_ms: tuple[float, ...]
    peer_rounds_ms: tuple[float, ...]
    measured_at: datetime


def add_crosscheck(store: ResultStore, r: CrossCheckRecord) -> bool:
    """Store one cross-check row; False (writing nothing) when the run already has it.

    The run and the device must have been stored first (`start_run`, `add_environment`)."""
    if r.status not in CHECK_STATUSES:
        raise DatabaseInputError(f"invalid cross-check status {r.status!r}; allowed: {allowed(CHECK_STATUSES)}")
    require_aware("measured_at", r.measured_at)

    def body(conn: Connection) -> bool:
        run_pk = conn.scalar(select(models.Run.id).where(models.Run.run_id == r.run_id))
        if run_pk is None:
            raise DatabaseInputError(f"run {r.run_id!r} is not in the database: call start_run first")
        env_pk = conn.scalar(
            select(models.Environment.id).where(models.Environment.device_fingerprint == r.device_fingerprint)
        )
        if env_pk is None:
            raise DatabaseInputError(f"device {r.device_fingerprint!r} is not in the database: "
                                     "call add_environment first")
        case_pk = upsert_case(conn, r.case)
        new_id = conn.scalar(
            insert_ignore(conn, models.CrossCheck.__table__)
            .values(
                run_id=run_pk, case_id=case_pk, environment_id=env_pk,
                device_key=device_key(r.device_uuid, r.device_fingerprint), cache=r.cache,
                timing_mode=r.timing_mode, peer=r.peer, peer_version=r.peer_version, status=r.status,
                error=r.error, peer_cache=r.peer_cache, peer_clock=r.peer_clock, rounds=int(r.rounds),
                rooflab_median_ms=r.rooflab_median_ms, rooflab_spread=r.rooflab_spread,
                peer_median_ms=r.peer_median_ms, peer_spread=r.peer_spread, ratio=r.ratio,
                disagrees=bool(r.disagrees), likely_reason=r.likely_reason,
                rooflab_rounds_ms=[float(x) for x in r.rooflab_rounds_ms],
                peer_rounds_ms=[float(x) for x in r.peer_rounds_ms], measured_at=r.measured_at,
            )
            .returning(models.CrossCheck.id)
        )
        return new_id is not None

    def attempt() -> bool:
        with store.engine.begin() as conn:
            return body(conn)

    return retry_locked(attempt)


FRAME_COLUMNS: tuple[str, ...] = (
    "run_id", "device_name", "device_kind", "device_fingerprint", "case_key", "op", "family", "backend", "dtype",
    "cache", "timing_mode", "peer", "peer_version", "status", "error", "peer_cache", "peer_clock", "rounds",
    "rooflab_median_ms", "rooflab_spread", "peer_median_ms", "peer_spread", "ratio", "disagrees", "likely_reason",
    "measured_at",
)


def crosscheck_frame(url: Db, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Every cross-check row (of `run_ids` when given), one column per FRAME_COLUMNS name."""
    x, r, e, c = models.CrossCheck, models.Run, models.Environment, models.Case
    query = (
        select(
            r.run_id, e.device_name, e.device_kind, e.device_fingerprint, c.case_key, c.op, c.family, c.backend,
            c.dtype, x.cache, x.timing_mode, x.peer, x.peer_version, x.status, x.error, x.peer_cache, x.peer_clock,
            x.rounds, x.rooflab_median_ms, x.rooflab_spread, x.peer_median_ms, x.peer_spread, x.ratio, x.disagrees,
            x.likely_reason, x.measured_at,
        )
        .join(r, r.id == x.run_id)
        .join(e, e.id == x.environment_id)
        .join(c, c.id == x.case_id)
        .order_by(x.id)
    )
    if run_ids:
        query = query.where(r.run_id.in_(list(run_ids)))
    with reading(url) as engine, engine.connect() as conn:
        rows = conn.execute(query).all()
    return pd.DataFrame([tuple(row) for row in rows], columns=list(FRAME_COLUMNS))
