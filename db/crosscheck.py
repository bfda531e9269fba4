"""Cross-check results: one row per case, device and peer timer, linked to a run and its case.

`add_crosscheck` writes one row in one transaction (nothing when the run already holds it);
`crosscheck_frame` reads them back with the device and case columns a report needs;
`summarize_groups` is the one rule for the per-peer summaries that `rooflab crosscheck` prints and
the report's cross-check page shows.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import pandas as pd
from sqlalchemy import Connection, select

from rooflab.db import models
from rooflab.db.dialect import insert_ignore
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import Db, reading
from rooflab.db.measurement_columns import device_key
from rooflab.db.store import ResultStore, require_aware, upsert_case
from rooflab.record import CaseRecord
from rooflab.vocab import CHECK_STATUSES, ResultStatus, allowed


@dataclass(frozen=True)
class CrossCheckRecord:
    run_id: str
    case: CaseRecord  # as a run stores it (runners.orchestration.records.case_record)
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
    contended: bool = False  # the machine was seen contended while either timer ran
    contention_reasons: tuple[str, ...] = ()
    # revision 0009: rooflab timed in the peer's mode, and how its configured mode differs
    peer_mode: str | None = None
    rooflab_mode: str | None = None
    method_differences: tuple[str, ...] = ()
    in_mode_median_ms: float | None = None
    in_mode_spread: float | None = None
    in_mode_ratio: float | None = None
    in_mode_rounds_ms: tuple[float, ...] = ()


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
                contended=bool(r.contended), contention_reasons=list(r.contention_reasons),
                peer_mode=r.peer_mode, rooflab_mode=r.rooflab_mode, method_differences=list(r.method_differences),
                in_mode_median_ms=r.in_mode_median_ms, in_mode_spread=r.in_mode_spread, in_mode_ratio=r.in_mode_ratio,
                in_mode_rounds_ms=[float(x) for x in r.in_mode_rounds_ms],
            )
            .returning(models.CrossCheck.id)
        )
        return new_id is not None

    return store.transaction(body)


FRAME_COLUMNS: tuple[str, ...] = (
    "run_id", "device_name", "device_kind", "device_fingerprint", "case_key", "op", "family", "backend", "dtype",
    "cache", "timing_mode", "peer", "peer_version", "status", "error", "peer_cache", "peer_clock", "rounds",
    "rooflab_median_ms", "rooflab_spread", "peer_median_ms", "peer_spread", "ratio", "disagrees", "likely_reason",
    "measured_at", "contended", "contention_reasons", "peer_mode", "rooflab_mode", "method_differences",
    "in_mode_median_ms", "in_mode_spread", "in_mode_ratio",
)


def crosscheck_frame(url: Db, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Every cross-check row (of `run_ids` when given), one column per FRAME_COLUMNS name."""
    x, r, e, c = models.CrossCheck, models.Run, models.Environment, models.Case
    query = (
        select(
            r.run_id, e.device_name, e.device_kind, e.device_fingerprint, c.case_key, c.op, c.family, c.backend,
            c.dtype, x.cache, x.timing_mode, x.peer, x.peer_version, x.status, x.error, x.peer_cache, x.peer_clock,
            x.rounds, x.rooflab_median_ms, x.rooflab_spread, x.peer_median_ms, x.peer_spread, x.ratio, x.disagrees,
            x.likely_reason, x.measured_at, x.contended, x.contention_reasons, x.peer_mode, x.rooflab_mode,
            x.method_differences, x.in_mode_median_ms, x.in_mode_spread, x.in_mode_ratio,
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


# ---------------------------------------------------------------- summaries


@dataclass(frozen=True)
class GroupSummary:
    """One peer over one family (family `all`: every case): how many cases, how many disagree,
    how many were timed on a contended machine, and over the others the geometric-mean ratio and
    the worst case, of both ratios (as configured: the method difference; in the peer's mode: the
    engines' agreement, on which a disagreement is judged)."""

    peer: str
    family: str
    cases: int
    disagreements: int
    ratio_geomean: float | None  # None when every case of the group was contended
    worst_case_key: str | None
    worst_ratio: float | None
    contended: int = 0
    in_mode_ratio_geomean: float | None = None  # None also for rows stored before revision 0009
    in_mode_worst_case_key: str | None = None
    in_mode_worst_ratio: float | None = None


def geometric_mean(ratios: Iterable[float]) -> float | None:
    values = [r for r in ratios if r > 0 and math.isfinite(r)]
    if not values:
        return None
    return math.exp(sum(math.log(r) for r in values) / len(values))


def worst(ratios: dict[str, float]) -> tuple[str, float] | None:
    """The key whose ratio is furthest from 1 (in log terms), with its ratio."""
    if not ratios:
        return None
    key = max(ratios, key=lambda k: abs(math.log(ratios[k])))
    return key, ratios[key]


class CheckRow(Protocol):
    """A cross-check row as the summaries read it: runners.crosscheck's PeerCheck, or a row of
    `crosscheck_frame` (where a missing ratio is NaN); `in_mode_ratio` is read where a row has it."""

    @property
    def peer(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def case_key(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def ratio(self) -> float | None: ...
    @property
    def disagrees(self) -> bool: ...
    @property
    def contended(self) -> bool: ...


def summarize_groups(rows: Iterable[CheckRow], *, with_all: bool) -> list[GroupSummary]:
    """Per peer (in order of first appearance): every family together (`all`, when `with_all`),
    then each family. `rows` have the attributes peer, family, case_key, status, ratio, disagrees
    and contended (and in_mode_ratio, where known); only `ok` rows with a ratio count. A contended
    row is counted and its disagreement too, but its ratios are left out of the geometric means and
    the worst cases: a figure taken while something else competed for the machine says nothing
    about either timer."""
    ok = [r for r in rows if r.status == ResultStatus.OK and r.ratio is not None and not _missing(r.ratio)]
    out: list[GroupSummary] = []
    for peer in dict.fromkeys(r.peer for r in ok):
        mine = [r for r in ok if r.peer == peer]
        families = (["all"] if with_all else []) + list(dict.fromkeys(r.family for r in mine))
        for family in families:
            group = mine if family == "all" else [r for r in mine if r.family == family]
            clean = [r for r in group if not bool(r.contended)]
            ratios = {str(r.case_key): float(r.ratio) for r in clean if r.ratio is not None}  # every ok row has one
            in_mode = {str(r.case_key): float(x) for r in clean
                       if (x := getattr(r, "in_mode_ratio", None)) is not None and not _missing(x)}
            w, wm = worst(ratios), worst(in_mode)
            out.append(GroupSummary(
                peer=str(peer), family=str(family), cases=len(group),
                disagreements=sum(bool(r.disagrees) for r in group), ratio_geomean=geometric_mean(ratios.values()),
                worst_case_key=w[0] if w else None, worst_ratio=w[1] if w else None,
                contended=sum(bool(r.contended) for r in group), in_mode_ratio_geomean=geometric_mean(in_mode.values()),
                in_mode_worst_case_key=wm[0] if wm else None, in_mode_worst_ratio=wm[1] if wm else None,
            ))
    return out


def _missing(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
