"""The per-series state kept between nights on PostgreSQL: each kind of whole-history fact
(db.series_facts) over the settled runs, so that a fleet's night reads its own results and the state
instead of a grouped pass over every result (a year of 64 GPUs: 46.7 M results, minutes a pass).

- Settled: a run that started more than LIVE_WINDOW before the newest run. Newer runs may still
  grow (a late shard, a resumed run) and are always read live.
- `fold` adds the settled runs not yet in the state of a kind: their facts grouped in the database
  and merged into `series_state` (counts added, earliest first and latest last start), each run
  listed in `series_state_runs` with its count of journal writes (db.result_writes) as read in the
  same snapshot. One fold at a time (an advisory lock); in one REPEATABLE READ transaction.
- The state holds while every run it lists still exists with the same count of writes: a result
  written into, changed in or deleted from a folded run, or the run deleted, and the kind's state
  is dropped and folded again from the start (the cost of one grouped pass, once).
- `read_facts`: the state and the runs it does not hold, read live, merged; where the state does not
  hold (a write after the fold, a role that may not write) every run is read live: the facts are
  always those of every result.

SQLite databases keep no state: `read_facts` reads them live (a device's year takes seconds there).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError

from rooflab.db import models
from rooflab.db.handle import Db, reading
from rooflab.db.series_facts import FactKey, FactKind, FactRow, FactValue, fact_rows, grouped, merged

LIVE_WINDOW = timedelta(days=2)  # runs started this close to the newest one are read live, never folded
LOCK_KEY = 0x726F_6F66  # the advisory lock of a fold ("roof")
STATE_COLUMNS = ("kind", "case_id", "series_key", "n_ok_runs", "first_ok_start", "last_ok_start")

log = logging.getLogger(__name__)


def read_facts(url: Db, kind: FactKind) -> tuple[list[FactRow], list[tuple[str, datetime]]]:
    """(the facts of `kind` over every run, in the order of case_key and key; every run's (run_id,
    started_at) in run order), read in one snapshot. On PostgreSQL the settled runs are folded into
    the state first."""
    with reading(url) as engine:
        postgres = engine.dialect.name == "postgresql"
        if postgres:
            fold(engine, kind)
        connection = engine.connect()
        if postgres:
            connection = connection.execution_options(isolation_level="REPEATABLE READ")
        with connection as conn, conn.begin():
            facts = state_facts(conn, kind) if postgres else fact_rows(conn, kind)
            c, r = models.Case, models.Run
            case_keys = {int(i): str(k) for i, k in conn.execute(select(c.id, c.case_key))}
            run_starts = [(str(run), started) for run, started in
                          conn.execute(select(r.run_id, r.started_at).order_by(r.started_at, r.run_id))]
    rows = [FactRow(case_keys[case_id], key, *value) for (case_id, key), value in facts.items()]
    rows.sort(key=lambda row: (row.case_key, *("" if v is None else v for v in row.key)))
    return rows, run_starts


def state_facts(conn: Connection, kind: FactKind) -> dict[FactKey, FactValue]:
    """The facts of `kind` over every run: the state's, merged with those of the runs it does not
    hold read live; every run read live where the state does not hold (the module doc)."""
    existing = _run_ids(conn)
    folded = _holding(conn, _folded(conn, kind), existing)
    if folded is None:
        return fact_rows(conn, kind)
    s = models.SeriesState
    live = [run for run in existing if run not in folded]
    held: dict[FactKey, FactValue] = {}
    if folded:
        for case_id, key, n, first, last in conn.execute(
                select(s.case_id, s.series_key, s.n_ok_runs, s.first_ok_start, s.last_ok_start)
                .where(s.kind == str(kind))):
            held[(int(case_id), tuple(json.loads(key)))] = (int(n), first, last)
    return merged([held, fact_rows(conn, kind, live)]) if live else held


def _holding(conn: Connection, folded: dict[int, int], existing: list[int]) -> dict[int, int] | None:
    """`folded` (the runs a kind's state holds: runs.id -> its writes then), or None when the state
    no longer holds: a run it lists is not among `existing`, or has had writes since."""
    if not folded:
        return folded
    writes, present = _writes(conn), set(existing)
    if all(run in present and writes.get(run, 0) == n for run, n in folded.items()):
        return folded
    return None


def _run_ids(conn: Connection) -> list[int]:
    return list(conn.execute(select(models.Run.id)).scalars())


def _folded(conn: Connection, kind: FactKind) -> dict[int, int]:
    s = models.SeriesStateRun
    return {int(run): int(n) for run, n in conn.execute(select(s.run_id, s.writes).where(s.kind == str(kind)))}


def _writes(conn: Connection, runs: Sequence[int] | None = None) -> dict[int, int]:
    """Each run's count of journal writes (db.result_writes)."""
    w = models.ResultWrite
    query = select(w.run_id, func.sum(w.writes)).group_by(w.run_id)
    if runs is not None:
        query = query.where(w.run_id.in_(list(runs)))
    return {int(run): int(n) for run, n in conn.execute(query)}


def settled_runs(conn: Connection, live_window: timedelta = LIVE_WINDOW) -> list[int]:
    """The runs (runs.id, in run order) that started more than `live_window` before the newest one."""
    r = models.Run
    newest = conn.execute(select(func.max(r.started_at))).scalar()
    if newest is None:
        return []
    return list(conn.execute(select(r.id).where(r.started_at < newest - live_window)
                             .order_by(r.started_at, r.run_id)).scalars())


def fold(engine: Engine, kind: FactKind, *, live_window: timedelta = LIVE_WINDOW) -> int:
    """Fold the settled runs not yet in the state of `kind` into it (the module doc; `live_window`
    says which are settled); the number of runs folded. A database this role may not write keeps
    its state as it is (read live meanwhile)."""
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({LOCK_KEY})")
            conn.commit()
            try:
                snapshot = conn.execution_options(isolation_level="REPEATABLE READ")
                with snapshot.begin():
                    return _fold_in(snapshot, kind, live_window)
            finally:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({LOCK_KEY})")
                conn.commit()
    except DBAPIError as exc:
        log.warning("the per-series state was not updated (%s): the whole history is read instead",
                    str(getattr(exc, "orig", exc)).strip().splitlines()[0])
        return 0


def _fold_in(conn: Connection, kind: FactKind, live_window: timedelta) -> int:
    s, sr, w = models.SeriesState, models.SeriesStateRun, models.ResultWrite
    settled = settled_runs(conn, live_window)
    folded = _folded(conn, kind)
    if folded and _holding(conn, folded, _run_ids(conn)) is None:
        conn.execute(delete(s).where(s.kind == str(kind)))  # no longer holds: built again from the start
        conn.execute(delete(sr).where(sr.kind == str(kind)))
        folded = {}
    todo = [run for run in settled if run not in folded]
    if not todo:
        return 0
    writes = _writes(conn, todo)
    insert = pg_insert(s).from_select(list(STATE_COLUMNS), grouped(kind, todo, key_text=True))
    conn.execute(insert.on_conflict_do_update(constraint="uq_series_state_key", set_={
        "n_ok_runs": s.n_ok_runs + insert.excluded.n_ok_runs,
        "first_ok_start": func.least(s.first_ok_start, insert.excluded.first_ok_start),
        "last_ok_start": func.greatest(s.last_ok_start, insert.excluded.last_ok_start)}))
    conn.execute(pg_insert(sr), [{"kind": str(kind), "run_id": run, "writes": writes.get(run, 0)} for run in todo])
    # the journal of the runs folded, one row each (a writer of a result a statement leaves one a result)
    many = [run for run in todo if writes.get(run, 0) > 1]
    if many:
        conn.execute(delete(w).where(w.run_id.in_(many)))
        conn.execute(pg_insert(w), [{"run_id": run, "writes": writes[run]} for run in many])
    return len(todo)
