"""ResultStore: runs, shards, environments, measurements, idempotence (SQLite and PostgreSQL)."""
from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from datetime import datetime

import pandas as pd
import pytest
from sqlalchemy import select

from rooflab.db import models, query
from rooflab.db.engine import make_engine
from rooflab.db.errors import DatabaseInputError
from rooflab.db.samples import unpack
from rooflab.db.store import ResultStore
from tests.db.factories import make_case, make_env, make_measurement, make_run


def test_measurements_round_trip_with_samples_and_derived_figures(any_url: str) -> None:
    rng = random.Random()
    run, env = make_run("r-1", rng=rng), make_env(0)
    with ResultStore(any_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        records = [make_measurement(run, make_case(i), env, rng=rng) for i in range(6)]
        records.append(make_measurement(run, make_case(6), env, rng=rng, status="failed"))
        assert all(store.add_measurement(m) for m in records)
        assert store.measured_case_keys("r-1") == {m.identity.case.case_key for m in records}
    frame = query.results(any_url).set_index("case_key")
    for m in records:
        row = frame.loc[m.identity.case.case_key]
        assert row["status"] == m.status
        if m.status == "ok":
            assert m.median_ms is not None and row["median_ms"] == m.median_ms
            assert row["tflops"] == pytest.approx(m.work.flops / (m.median_ms * 1e-3) / 1e12, rel=1e-12)
            assert row["gbps"] == pytest.approx(m.work.bytes / (m.median_ms * 1e-3) / 1e9, rel=1e-12)
        else:
            assert row["error"] == m.error
            assert pd.isna(row["tflops"]) and pd.isna(row["gbps"]) and pd.isna(row["median_ms"])
    engine = make_engine(any_url, write=False)
    with engine.connect() as conn:
        stored = {
            key: unpack(blob, count)
            for key, count, blob in conn.execute(
                select(models.Case.case_key, models.Sample.count, models.Sample.values_f64le)
                .join(models.Measurement, models.Measurement.id == models.Sample.measurement_id)
                .join(models.Case, models.Case.id == models.Measurement.case_id)
            )
        }
    engine.dispose()
    assert stored == {m.identity.case.case_key: m.samples_ms for m in records if m.status == "ok"}


def test_every_measurement_is_written_by_one_statement_built_once(any_url: str) -> None:
    """The measurement INSERT is one statement object whose values travel as execution parameters:
    building a new `insert().values(...)` per result (each of its ~50 column values coerced and keyed)
    was most of the CPU a store spends per result."""
    from sqlalchemy import event
    from sqlalchemy.sql.dml import Insert

    rng = random.Random()
    run, env = make_run("one-stmt", rng=rng), make_env(2)
    inserts: list[Insert] = []

    def seen(conn: object, clause: object, multiparams: object, params: object, options: object) -> None:
        if isinstance(clause, Insert) and clause.table is models.Measurement.__table__:
            inserts.append(clause)  # kept alive: ids of dropped statements could be reused

    with ResultStore(any_url) as store:
        event.listen(store.engine, "before_execute", seen)
        store.start_run(run)
        store.add_environment(run.run_id, env)
        records = [make_measurement(run, make_case(i), env, rng=rng) for i in range(5)]
        assert all(store.add_measurement(m) for m in records)
        assert not store.add_measurement(records[0])
        event.remove(store.engine, "before_execute", seen)
    assert len(inserts) == 6 and len({id(s) for s in inserts}) == 1
    frame = query.results(any_url).set_index("case_key")
    assert [frame.loc[m.identity.case.case_key, "median_ms"] for m in records] == [m.median_ms for m in records]


def test_add_measurement_twice_writes_nothing_the_second_time(any_url: str) -> None:
    rng = random.Random()
    run, env = make_run("dup", rng=rng), make_env(1)
    with ResultStore(any_url) as store:
        store.start_run(run)
        store.start_run(run)  # idempotent
        store.add_environment(run.run_id, env)
        store.add_environment(run.run_id, env)
        first = make_measurement(run, make_case(3), env, rng=rng)
        second = make_measurement(run, make_case(3), env, rng=rng)  # same key, other numbers
        assert store.add_measurement(first) is True
        assert store.add_measurement(second) is False
        other_device = make_env(1, uuid="GPU-other")
        store.add_environment(run.run_id, other_device)
        assert store.add_measurement(
            replace(second, identity=replace(second.identity, device_uuid="GPU-other"))) is True
        assert store.measured_case_keys("dup", device_key="GPU-other") == {first.identity.case.case_key}
    frame = query.results(any_url)
    assert len(frame) == 2
    assert set(frame["median_ms"]) == {first.median_ms, second.median_ms}


def test_start_run_with_another_spec_under_the_same_id_is_refused(sqlite_url: str) -> None:
    with ResultStore(sqlite_url) as store:
        store.start_run(make_run("same"))
        with pytest.raises(DatabaseInputError, match="different spec"):
            store.start_run(make_run("same"))


def test_get_run_returns_the_stored_spec_text(sqlite_url: str) -> None:
    run = make_run("resume-me", spec_text="name: nightly\nbenchmarks:\n  - op: copy\n")
    with ResultStore(sqlite_url) as store:
        assert store.get_run("nope") is None
        store.start_run(run)
        assert store.get_run("resume-me") == run


def test_unknown_run_environment_and_status_are_refused(sqlite_url: str) -> None:
    run, env = make_run("x"), make_env(2)
    m = make_measurement(run, make_case(0), env)
    with ResultStore(sqlite_url) as store:
        with pytest.raises(DatabaseInputError, match="start_run"):
            store.add_measurement(m)
        store.start_run(run)
        with pytest.raises(DatabaseInputError, match="add_environment"):
            store.add_measurement(m)
        store.add_environment(run.run_id, env)
        with pytest.raises(DatabaseInputError, match="invalid status"):
            store.add_measurement(replace(m, status="great"))
        with pytest.raises(DatabaseInputError, match="invalid run status"):
            store.finish_run("x", "done")
        with pytest.raises(DatabaseInputError, match="timezone-aware"):
            store.add_measurement(replace(m, identity=replace(m.identity, measured_at=datetime(2026, 1, 1))))  # naive
        assert store.measured_case_keys("x") == set()


def test_sharded_run_is_complete_only_when_every_shard_finished(any_url: str) -> None:
    run = make_run("sharded")
    with ResultStore(any_url) as store:
        for i in range(3):
            store.start_run(run, shard=f"{i}/3")
        store.finish_run("sharded", "complete", shard="0/3")
        store.finish_run("sharded", "complete", shard="2/3")
        assert store.run_status("sharded") == "running"
        assert [s.status for s in store.run_shards("sharded")] == ["complete", "running", "complete"]
        store.finish_run("sharded", "interrupted", shard="1/3")
        assert store.run_status("sharded") == "interrupted"
        shards = store.run_shards("sharded")
        assert [s.shard for s in shards] == ["0/3", "1/3", "2/3"]
        assert all(s.finished_at is not None and s.finished_at.tzinfo is not None for s in shards)
        with pytest.raises(DatabaseInputError, match="0-based"):
            store.start_run(run, shard="3/3")
    runs = query.runs(any_url)
    assert runs.loc[0, "n_shards"] == 3 and runs.loc[0, "n_shards_finished"] == 3


def test_sqlite_file_is_in_wal_mode_with_timestamps_in_utc(sqlite_url: str) -> None:
    run = make_run("wal")
    with ResultStore(sqlite_url) as store:
        store.start_run(run)
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    frame = query.runs(sqlite_url)
    assert frame.loc[0, "started_at"] == run.started_at
    assert str(frame["started_at"].dt.tz) == "UTC"
