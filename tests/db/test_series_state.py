"""The per-series state kept between nights on PostgreSQL (db.series_state) against one grouped pass
over every result (db.series_facts.fact_rows): equal after a fold, a new night, a write into a folded
run, a deleted run, two folds at once, a role that may not write, a TRUNCATE; the journal's triggers
(db.result_writes) from the models and from the upgrade."""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from alembic import command
from sqlalchemy import create_engine, select, text

from rooflab.db import models, query, series_state
from rooflab.db.handle import reading
from rooflab.db.result_writes import TRIGGER_NAMES
from rooflab.db.schema import alembic_config
from rooflab.db.series_facts import FactKind, fact_rows
from rooflab.db.series_state import fold, read_facts
from rooflab.db.urls import normalize_url
from tests.db.pg import POSTGRES_SKIP_REASON, fresh_postgres_url, postgres_server_url
from tests.reports.synth import row, write_db

pytestmark = pytest.mark.postgres
NIGHTS = 30


def _rows(nights: range, seed: int) -> list[dict]:
    """Two cases on three GPUs and one device without a UUID: a driver update on GPU-1 (night 15), a
    flush method that changes on case 2 (night 10), failed results, and two runs that start at the
    same instant (night 20)."""
    rng = np.random.default_rng(seed)
    rows = []
    for night in nights:
        for n in (1, 2):
            for uuid in ("GPU-0", "GPU-1", "GPU-2", None):
                failed = rng.random() < 0.1
                rows.append(row(op="stream_triad", family="probe", params={"n": n}, median_ms=float(rng.uniform(1, 2)),
                                flops=2 * n, nbytes=12 * n, run_id=f"run-{night:04d}", run_order=night,
                                status="failed" if failed else "ok",
                                fingerprint="fp-new" if uuid == "GPU-1" and night >= 15 else "fp-h100",
                                flush_method=("memset" if n == 2 and night >= 10 else "l2_sweep"),
                                host="node1" if uuid is not None else "node9"))
                rows[-1]["device_uuid"] = uuid
        if night == 20:  # a second run at the same start
            twin = [dict(r, run_id="run-0020b") for r in rows[-8:]]
            rows.extend(twin)
    return rows


@pytest.fixture
def url() -> Iterator[str]:
    if postgres_server_url() is None:
        pytest.skip(POSTGRES_SKIP_REASON)
    with fresh_postgres_url() as url:
        write_db(url, _rows(range(1, NIGHTS + 1), seed=7))
        yield url


def _facts(url: str, kind: FactKind) -> dict[tuple, tuple]:
    rows, _ = read_facts(url, kind)
    return {(r.case_key, *r.key): (r.n_ok_runs, r.first_ok_start, r.last_ok_start) for r in rows}


def _every_result(url: str, kind: FactKind) -> dict[tuple, tuple]:
    """The facts by one grouped pass over every result (what the state must give)."""
    with reading(url) as engine, engine.connect() as conn:
        keys = {i: k for i, k in conn.execute(select(models.Case.id, models.Case.case_key))}
        return {(keys[case_id], *key): value for (case_id, key), value in fact_rows(conn, kind).items()}


def _sql(url: str, statement: str, **params: Any) -> Any:
    engine = create_engine(normalize_url(url))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return result.all() if result.returns_rows else None
    finally:
        engine.dispose()


def _folded(url: str, kind: FactKind) -> int:
    return _sql(url, "SELECT count(*) FROM series_state_runs WHERE kind = :k", k=str(kind))[0][0]


def test_the_state_gives_the_facts_of_every_result(url):
    for kind in FactKind:
        facts = _facts(url, kind)
        assert facts == _every_result(url, kind), kind
        assert _folded(url, kind) == NIGHTS + 1 - 3  # the twin run too; the newest three started within two days
        assert any(v[0] > 1 for v in facts.values())
        assert _facts(url, kind) == facts  # read again from the state: the same


def test_a_new_night_is_folded_alone_and_the_facts_stay_those_of_every_result(url):
    kind = FactKind.SUMMARY_BY_DEVICE
    _facts(url, kind)
    write_db(url, _rows(range(NIGHTS + 1, NIGHTS + 2), seed=8))
    with reading(url) as engine:
        assert fold(engine, kind) == 1  # night 28 settled: nothing built again
    assert _facts(url, kind) == _every_result(url, kind)


@pytest.mark.parametrize("change", [
    "UPDATE measurements SET status = 'failed' WHERE id = (SELECT min(m.id) FROM measurements m JOIN runs r "
    "ON r.id = m.run_id WHERE r.run_id = 'run-0005' AND m.status = 'ok')",
    "DELETE FROM runs WHERE run_id = 'run-0003'",
    "DELETE FROM measurements WHERE device_uuid = 'GPU-2' AND run_id = (SELECT id FROM runs WHERE run_id = 'run-0001')",
])
def test_a_change_to_a_folded_run_is_seen_and_the_state_built_again(url, change):
    kinds = list(FactKind)
    for kind in kinds:
        _facts(url, kind)
    _sql(url, change)
    with reading(url) as engine, engine.connect() as conn:  # before any fold: the state no longer holds
        with conn.begin():
            for kind in kinds:
                runs = series_state._run_ids(conn)
                assert series_state._holding(conn, series_state._folded(conn, kind), runs) is None
    for kind in kinds:
        assert _facts(url, kind) == _every_result(url, kind), kind
        assert _folded(url, kind) == len(_sql(url, "SELECT 1 FROM runs WHERE started_at < "
                                                   "(SELECT max(started_at) FROM runs) - interval '2 days'"))


def test_two_folds_at_once_fold_each_run_once(url):
    kind = FactKind.METHODS_BY_DEVICE
    start = threading.Barrier(2)
    folded: list[int] = []

    def one() -> None:
        with reading(url) as engine:
            start.wait()
            folded.append(fold(engine, kind))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(folded) == [0, NIGHTS + 1 - 3]
    assert _facts(url, kind) == _every_result(url, kind)


def test_a_run_written_a_result_a_statement_leaves_one_journal_row_once_folded(url):
    ids = [i for (i,) in _sql(url, "SELECT m.id FROM measurements m JOIN runs r ON r.id = m.run_id "
                                   "WHERE r.run_id = 'run-0004' ORDER BY m.id LIMIT 5")]
    for i in ids:
        _sql(url, "UPDATE measurements SET median_ms = median_ms WHERE id = :i", i=i)
    run = "(SELECT id FROM runs WHERE run_id = 'run-0004')"
    assert _sql(url, f"SELECT count(*), sum(writes) FROM result_writes WHERE run_id = {run}")[0] == (6, 6)
    _facts(url, FactKind.SUMMARY_BY_MODEL)
    assert _sql(url, f"SELECT count(*), sum(writes) FROM result_writes WHERE run_id = {run}")[0] == (1, 6)
    assert _facts(url, FactKind.ENVIRONMENTS) == _every_result(url, FactKind.ENVIRONMENTS)  # the other kinds hold


def test_a_database_this_role_may_not_write_is_read_whole(url, caplog):
    name = normalize_url(url).database
    _sql(url, f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    kind = FactKind.SUMMARY_BY_DEVICE
    with caplog.at_level(logging.WARNING, logger="rooflab.db.series_state"):
        assert _facts(url, kind) == _every_result(url, kind)
    assert "not updated" in caplog.text
    assert _folded(url, kind) == 0


def test_a_truncate_empties_the_state(url):
    kind = FactKind.SUMMARY_BY_DEVICE
    _facts(url, kind)
    _sql(url, "TRUNCATE measurements CASCADE")
    assert _folded(url, kind) == 0
    assert _facts(url, kind) == {} == _every_result(url, kind)


def test_the_journal_triggers_come_with_a_new_database_and_with_the_upgrade():
    if postgres_server_url() is None:
        pytest.skip(POSTGRES_SKIP_REASON)
    triggers = ("SELECT tgname FROM pg_trigger WHERE tgrelid = 'measurements'::regclass AND NOT tgisinternal "
                "ORDER BY tgname")
    with fresh_postgres_url() as url:
        write_db(url, _rows(range(1, 3), seed=1))
        assert sorted(t for (t,) in _sql(url, triggers)) == sorted(TRIGGER_NAMES)
    with fresh_postgres_url() as url:
        engine = create_engine(normalize_url(url))
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "0012")
        assert _sql(url, triggers) == []
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "head")
        engine.dispose()
        assert sorted(t for (t,) in _sql(url, triggers)) == sorted(TRIGGER_NAMES)


def test_runs_folded_under_a_shorter_live_window_keep_the_state(url):
    """A state that holds runs newer than the settled ones (folded with a shorter window, or the window
    changed since) still holds: nothing is built again, and the live runs are the ones it lacks."""
    kind = FactKind.ENVIRONMENTS
    with reading(url) as engine:
        assert fold(engine, kind, live_window=timedelta(0)) == NIGHTS  # all but the newest run
        assert fold(engine, kind) == 0
    assert _folded(url, kind) == NIGHTS
    assert _facts(url, kind) == _every_result(url, kind)


def test_the_result_estimate_sees_a_new_database_and_an_empty_one(url, tmp_path):
    """What the report's choice of a fleet's history reads (query.result_estimate): never 0 for a
    database with results, whatever the planner's statistics say yet; exact on SQLite."""
    stored = _sql(url, "SELECT count(*) FROM measurements")[0][0]
    assert stored > 0 and query.result_estimate(url) >= stored // 2
    _sql(url, "ANALYZE measurements")
    assert query.result_estimate(url) == stored
    sqlite = f"sqlite:///{tmp_path / 'r.db'}"
    write_db(sqlite, _rows(range(1, 4), seed=3))
    assert query.result_estimate(sqlite) == 3 * 8
