"""Several writer processes at once, and a writer killed with SIGKILL, on SQLite and PostgreSQL."""
from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from rooflab.db import engine as db_engine
from rooflab.db import models, query
from rooflab.db.engine import make_engine
from rooflab.db.samples import unpack
from rooflab.db.store import ResultStore
from tests.db.factories import make_case, make_env, make_measurement, make_run
from tests.db.writers import endless_writer, shard_writers

WRITERS = 4
PER_SHARD = 40  # each writer's own cases; they write at once (a barrier), so a few dozen make them contend
SHARED = 20  # cases every writer writes too: the same keys at the same moment
KILL_AFTER = 40  # the killed writer is killed once this many of its measurements are stored
MISSING = 20  # the cases of its run that it never wrote, which the resume writes


def test_four_writer_processes_lose_nothing_and_duplicate_nothing(any_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    seed = random.randrange(1 << 30)
    # one spawned process that imports once and forks the WRITERS writers (tests/db/writers.py)
    hub = ctx.Process(target=shard_writers, args=(any_url, seed, WRITERS, PER_SHARD, SHARED, queue))
    hub.start()
    deadline = time.monotonic() + 300
    while queue.empty() and hub.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not queue.empty(), f"the writers' process ended (exit code {hub.exitcode}) without their result"
    added, exitcodes = queue.get(timeout=10)
    hub.join(timeout=30)
    assert exitcodes == [0] * WRITERS and hub.exitcode == 0, f"writers exited with {exitcodes}"

    expected_keys = {make_case(1000 + i * PER_SHARD + j).case_key for i in range(WRITERS) for j in range(PER_SHARD)}
    expected_keys |= {make_case(i).case_key for i in range(SHARED)}
    frame = query.results(any_url, run_id="concurrent")
    assert len(frame) == WRITERS * PER_SHARD + SHARED == sum(added.values()) and len(added) == WRITERS
    assert set(frame["case_key"]) == expected_keys
    assert not frame.duplicated(["case_key", "cache", "timing_mode", "device_uuid"]).any()
    for i in range(WRITERS):  # every shard wrote all of its own cases
        assert (frame["shard"] == f"{i}/{WRITERS}").sum() >= PER_SHARD
    runs = query.runs(any_url)
    assert runs.loc[0, "status"] == "complete" and runs.loc[0, "n_shards_finished"] == WRITERS
    _assert_samples_complete(any_url)


def _assert_samples_complete(url: str) -> None:
    """Every ok measurement has exactly its samples; nothing else has any."""
    engine = make_engine(url, write=False)
    m, s = models.Measurement, models.Sample
    with engine.connect() as conn:
        rows = conn.execute(
            select(m.status, m.__table__.c.n_samples, s.count, s.values_f64le, m.__table__.c.min_ms,
                   m.__table__.c.max_ms)
            .select_from(m.__table__.outerjoin(s.__table__, s.measurement_id == m.id))
        ).all()
        orphans = conn.execute(
            select(func.count()).select_from(s).where(~s.measurement_id.in_(select(m.id)))
        ).scalar_one()
    engine.dispose()
    assert orphans == 0
    for status, n_samples, count, blob, min_ms, max_ms in rows:
        if status == "ok":
            values = unpack(blob, count)
            assert len(values) == n_samples and min(values) == min_ms and max(values) == max_ms
        else:
            assert blob is None


def _count(url: str) -> int:
    engine = make_engine(url, write=False)
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(models.Measurement)).scalar_one()
    except Exception:  # noqa: BLE001 - the schema may not exist yet
        return 0
    finally:
        engine.dispose()


def test_a_writer_killed_mid_run_leaves_a_consistent_database_that_resume_completes(any_url: str) -> None:
    seed = random.randrange(1 << 30)
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=endless_writer, args=(any_url, seed))
    proc.start()
    deadline = time.monotonic() + 120
    while _count(any_url) < KILL_AFTER and time.monotonic() < deadline and proc.is_alive():
        time.sleep(0.05)
    assert proc.pid is not None  # started above
    os.kill(proc.pid, signal.SIGKILL)  # while it writes: it never stops by itself before this
    proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL, "the writer ended before it could be killed"

    if any_url.startswith("sqlite"):
        path = any_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
    _assert_samples_complete(any_url)
    done_before = _count(any_url)
    assert done_before >= KILL_AFTER
    n_cases = done_before + MISSING  # the killed run's cases: those it wrote in order, and MISSING more

    # resume: measure only what is missing, as `rooflab run --resume` does
    run, env = make_run("killed", rng=random.Random(seed)), make_env(3)
    with ResultStore(any_url) as store:
        stored = store.get_run("killed")
        assert stored is not None and stored.spec_text == run.spec_text
        store.start_run(run)
        store.add_environment(run.run_id, env)
        measured = store.measured_case_keys("killed")
        assert measured == {make_case(i).case_key for i in range(done_before)}  # its first cases, each whole
        rng = random.Random()
        missing = [make_case(i) for i in range(done_before, n_cases)]
        assert all(store.add_measurement(make_measurement(run, c, env, rng=rng, n_samples=5)) for c in missing)
        assert not store.add_measurement(make_measurement(run, make_case(0), env, rng=rng))
        store.finish_run("killed", "complete")
    frame = query.results(any_url)
    assert len(frame) == n_cases and frame["case_key"].is_unique
    _assert_samples_complete(any_url)


@pytest.mark.parametrize("wrapped", [True, False])
def test_a_lock_reported_by_sqlalchemy_or_raw_by_the_driver_is_retried_and_another_error_is_not(
        wrapped: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection's first write sets SQLite's journal mode on the driver's own cursor: a lock met
    there reaches retry_locked as the driver's sqlite3.OperationalError, not SQLAlchemy's."""
    monkeypatch.setattr(db_engine.time, "sleep", lambda _s: None)

    def error(text: str) -> Exception:
        raw = sqlite3.OperationalError(text)
        return OperationalError("PRAGMA journal_mode = WAL", {}, raw) if wrapped else raw

    calls: list[int] = []

    def locked_twice() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise error("database is locked")
        return "done"

    assert db_engine.retry_locked(locked_twice) == "done" and len(calls) == 3

    def no_such_table() -> str:
        calls.append(1)
        raise error("no such table: runs")

    calls.clear()
    with pytest.raises((OperationalError, sqlite3.OperationalError), match="no such table"):
        db_engine.retry_locked(no_such_table)
    assert len(calls) == 1
