"""Schema versions: creation at head, models == migrations, upgrade with data, refusal of other versions."""
from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from rooflab.db import query
from rooflab.db.counters import CounterRecord, add_counters, counters_frame
from rooflab.db.errors import SchemaVersionError
from rooflab.db.models import Base
from rooflab.db.schema import (
    MIGRATION_FILE_SEPARATOR,
    alembic_config,
    head_revision,
    newest_migration_file_revision,
    read_state,
    revisions,
    script_directory,
)
from rooflab.db.store import ResultStore
from rooflab.db.urls import normalize_url
from rooflab.runners.cli.app import app
from tests.db.factories import make_case, make_env, make_measurement, make_run
from tests.db.pg import POSTGRES_SKIP_REASON, fresh_postgres_url, postgres_server_url

runner = CliRunner()


def _file_digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.parent.glob(path.name + "*"))}


def test_there_are_at_least_two_revisions_and_a_new_database_is_created_at_head(any_url: str) -> None:
    assert revisions() == sorted(revisions()) and revisions()[:3] == ["0001", "0002", "0003"]
    assert read_state(any_url).kind == "empty"
    ResultStore(any_url).close()
    state = read_state(any_url)
    assert (state.kind, state.revision) == ("current", head_revision())
    shown = runner.invoke(app, ["db", "current", "--db", any_url, "--json"])
    assert shown.exit_code == 0
    head = head_revision()
    assert json.loads(shown.output) | {"db": None} == {"db": None, "state": "current", "revision": head, "head": head}


def test_the_migrations_replayed_from_nothing_build_exactly_the_models(any_url: str) -> None:
    """A new database is created from the models; an existing one changes only through the
    migrations: replayed from an empty database they must build the models' schema (server defaults:
    the next test)."""
    engine = create_engine(normalize_url(any_url))
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "head")
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    engine.dispose()
    assert diff == []


def _layout(url: str) -> dict[str, dict[str, object]]:
    """Every table's columns (by name), keys, indexes and constraints with their names, as the
    database reports them."""
    engine = create_engine(normalize_url(url))
    seen = inspect(engine)
    layout: dict[str, dict[str, object]] = {}
    for table in sorted(seen.get_table_names()):
        primary_key = seen.get_pk_constraint(table)
        layout[table] = {
            "columns": sorted((c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                              for c in seen.get_columns(table)),
            "primary key": (primary_key.get("name") or "", primary_key["constrained_columns"]),
            "foreign keys": sorted((f["name"] or "", tuple(f["constrained_columns"]), f["referred_table"],
                                    tuple(f["referred_columns"]), sorted(f.get("options", {}).items()))
                                   for f in seen.get_foreign_keys(table)),
            "indexes": sorted((i["name"] or "", tuple(i["column_names"]), bool(i["unique"]))
                              for i in seen.get_indexes(table)),
            "unique": sorted((u["name"] or "", tuple(u["column_names"])) for u in seen.get_unique_constraints(table)),
            "checks": sorted((c["name"] or "", c["sqltext"]) for c in seen.get_check_constraints(table)),
        }
    engine.dispose()
    return layout


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_new_database_has_the_layout_the_migrations_build(dialect: str, tmp_path: Path) -> None:
    """Names included: a later migration drops an index or a constraint by its name."""
    with ExitStack() as stack:
        if dialect == "sqlite":
            created, replayed = (f"sqlite:///{tmp_path / name}" for name in ("created.db", "replayed.db"))
        else:
            if postgres_server_url() is None:
                pytest.skip(POSTGRES_SKIP_REASON)
            created, replayed = (stack.enter_context(fresh_postgres_url()) for _ in range(2))
        ResultStore(created).close()
        engine = create_engine(normalize_url(replayed))
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "head")
        engine.dispose()
        assert read_state(created) == read_state(replayed) and read_state(created).kind == "current"
        assert _layout(created) == _layout(replayed)


def _insert_revision_one_rows(conn, dialect: str, n_measurements: int) -> list[float]:
    """Rows written as plain SQL, the way revision 0001 laid them out."""
    ts = "2026-01-02 03:04:05.250000" if dialect == "sqlite" else "2026-01-02 03:04:05.25+00"
    conn.execute(text(
        "INSERT INTO runs (id, run_id, suite, spec_text, spec_hash, started_at, finished_at, status, host, git_commit, "
        "git_dirty, command_line, rooflab_version) VALUES (1, 'old-run', 'nightly', 'name: nightly', 'ab12', "
        f"'{ts}', NULL, 'complete', 'node7', 'deadbeef', false, 'rooflab run nightly.yaml', '0.0.9')"
    ))
    conn.execute(text(
        "INSERT INTO environments (id, device_fingerprint, device_name, device_kind, identity, memory_bytes, l2_bytes, "
        f"sm_count, compute_capability, driver_version, cuda_version, torch_version, first_seen_at) "
        f"VALUES (1, 'fp-old', "
        f"'NVIDIA A100', 'cuda', '{{\"name\": \"NVIDIA A100\"}}', 85899345920, 41943040, 108, '8.0', '535', '12.2', "
        f"'2.3.0', '{ts}')"
    ))
    medians = []
    rng = random.Random()
    for i in range(n_measurements):
        median = rng.uniform(0.01, 5.0)
        medians.append(median)
        conn.execute(text(
            f"INSERT INTO cases (id, case_key, op, op_version, family, backend, dtype, params) VALUES ({i + 1}, "
            f"'copy.v1:eager:float32:cold:launch:n={i + 1}', 'copy', 1, 'pointwise', 'eager', 'float32', "
            f"'{{\"n\": {i + 1}}}')"
        ))
        conn.execute(
            text(
                "INSERT INTO measurements (id, run_id, case_id, environment_id, device_key, device_uuid, shard, cache, "
                "timing_mode, status, error, clock, measured_at, median_ms, n_samples, warmup_calls, "
                "launches_per_sample, flush_bytes, flops, bytes, throttle_reasons, throttled) VALUES "
                f"({i + 1}, 1, {i + 1}, 1, 'GPU-a', 'GPU-a', NULL, 'cold', 'launch', 'ok', NULL, 'cuda_events', "
                f"'{ts}', :median, 3, 5, 1, 0, 0, {8 * (i + 1)}, '[]', false)"
            ),
            {"median": median},
        )
        conn.execute(
            text(f"INSERT INTO samples (measurement_id, count, values_f64le) VALUES ({i + 1}, 3, :blob)"),
            {"blob": b"\x00" * 24},
        )
    return medians


def test_each_migration_file_is_named_after_its_revision_and_a_current_database_opens_without_alembic(
        sqlite_url: str) -> None:
    """The newest migration file's name gives the head revision, so a process that opens a database
    at head (every `rooflab run`, rank 0 of a collective step, `rooflab report`) imports no Alembic
    (nor, writing SQLite, PostgreSQL's dialect);
    another revision is judged by Alembic's list (test_upgrade_from_the_first_revision_keeps_the_data,
    test_a_newer_revision_is_refused_and_the_file_is_unchanged)."""
    for script in script_directory().walk_revisions():
        assert Path(script.path).name.startswith(script.revision + MIGRATION_FILE_SEPARATOR), script.path
    assert newest_migration_file_revision() == head_revision()
    ResultStore(sqlite_url).close()
    program = ("import sys\n"
               "from rooflab.db.schema import read_state\n"
               "from rooflab.db.store import ResultStore\n"
               "from tests.db.factories import make_run\n"
               f"with ResultStore({sqlite_url!r}) as store:\n"
               "    store.start_run(make_run('r'))\n"
               f"print(read_state({sqlite_url!r}).kind, 'alembic' in sys.modules,\n"
               "      'sqlalchemy.dialects.postgresql' in sys.modules)\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=root, timeout=120,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["current", "False", "False"]  # nor PostgreSQL's dialect, writing SQLite


def test_upgrade_from_the_first_revision_keeps_the_data(any_url: str) -> None:
    url = normalize_url(any_url)
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
        medians = _insert_revision_one_rows(conn, url.get_backend_name(), 25)
        if url.get_backend_name() == "postgresql":  # explicit ids were given: move the sequences past them
            for table in ("runs", "environments", "cases", "measurements"):
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                  f"(SELECT max(id) FROM {table}))"))
    engine.dispose()
    assert read_state(any_url).kind == "older"
    with pytest.raises(SchemaVersionError, match="rooflab db upgrade"):
        ResultStore(any_url)
    with pytest.raises(SchemaVersionError, match="older"):
        query.results(any_url)

    result = runner.invoke(app, ["db", "upgrade", "--db", any_url])
    assert result.exit_code == 0, result.output
    assert f"0001 -> {head_revision()}" in result.output
    assert read_state(any_url).kind == "current"

    frame = query.results(any_url)
    assert sorted(frame["median_ms"]) == sorted(medians)
    assert set(frame["run_id"]) == {"old-run"} and set(frame["device_name"]) == {"NVIDIA A100"}
    assert str(frame.loc[0, "started_at"]) == "2026-01-02 03:04:05.250000+00:00"
    # the upgraded database takes new writes, including shards (a table revision 0002 added)
    run, env = make_run("new-run"), make_env(5)
    with ResultStore(any_url) as store:
        store.start_run(run, shard="0/1")
        store.add_environment(run.run_id, env)
        assert store.add_measurement(make_measurement(run, make_case(1), env))
        store.finish_run(run.run_id, "complete", shard="0/1")
        assert store.run_status(run.run_id) == "complete"
    assert len(query.results(any_url)) == 26
    again = runner.invoke(app, ["db", "upgrade", "--db", any_url])
    assert again.exit_code == 0 and f"already at schema revision {head_revision()}" in again.output


def test_a_newer_revision_is_refused_and_the_file_is_unchanged(sqlite_url: str, tmp_path: Path) -> None:
    run, env = make_run("r"), make_env(0)
    with ResultStore(sqlite_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        store.add_measurement(make_measurement(run, make_case(0), env))
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099_from_the_future'")
    conn.close()
    before = _file_digest(path)
    with pytest.raises(SchemaVersionError, match="newer rooflab"):
        ResultStore(sqlite_url)
    export_file = tmp_path / "x.csv"
    for argv in (
        ["db", "upgrade", "--db", sqlite_url],
        ["db", "prune", "--samples-older-than", "1d", "--db", sqlite_url],
        ["export", "--format", "csv", "--db", sqlite_url],
        ["db", "merge", str(path), "--db", f"sqlite:///{tmp_path / 'target.db'}"],
    ):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "0099_from_the_future" in result.output
    export_file.write_text("")
    result = runner.invoke(app, ["import", str(export_file), "--db", sqlite_url])
    assert result.exit_code == 2
    assert _file_digest(path) == before
    assert not (tmp_path / "target.db").exists() or read_state(f"sqlite:///{tmp_path / 'target.db'}").kind == "empty"


def test_a_newer_revision_on_postgres_is_refused_without_writing(postgres_url: str) -> None:
    with ResultStore(postgres_url) as store:
        store.start_run(make_run("r"))
    engine = create_engine(normalize_url(postgres_url))
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
    with pytest.raises(SchemaVersionError, match="newer rooflab"):
        ResultStore(postgres_url)
    assert runner.invoke(app, ["db", "upgrade", "--db", postgres_url]).exit_code == 2
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0099_from_the_future"
        assert conn.execute(text("SELECT count(*) FROM runs")).scalar_one() == 1
    engine.dispose()


def test_tables_without_a_version_are_not_touched(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE runs (x INTEGER)")
    conn.close()
    with pytest.raises(SchemaVersionError, match="no schema version"):
        ResultStore(sqlite_url)


def test_migrations_are_found_from_any_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ResultStore("relative.db").close()
    assert read_state(f"sqlite:///{tmp_path / 'relative.db'}").kind == "current"


def _downgrade_then_upgrade(url: str, revision: str) -> None:
    """The database at `url` taken down to `revision` (as a database of then), then `rooflab db upgrade`."""
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), revision)
    engine.dispose()
    assert read_state(url).kind == "older"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0


def test_crosscheck_rows_stored_before_revision_0006_read_as_not_contended(any_url: str) -> None:
    """A cross-check row written before the contention columns existed keeps its figures through
    the upgrade and reads as not contended with no reasons (nothing was watched then)."""
    from datetime import UTC, datetime

    from rooflab.db.crosscheck import CrossCheckRecord, add_crosscheck, crosscheck_frame

    run, env, case = make_run("cc-run"), make_env(3), make_case(2)
    with ResultStore(any_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        for peer, contended in (("torch", True), ("do_bench", False)):
            add_crosscheck(store, CrossCheckRecord(
                run_id=run.run_id, case=case, device_fingerprint=env.device_fingerprint, device_uuid=None,
                cache="cold", timing_mode="launch", peer=peer, peer_version="1", status="ok", error=None,
                peer_cache="hot", peer_clock="host_block_mean", rounds=3, rooflab_median_ms=1.25,
                rooflab_spread=0.01, peer_median_ms=1.0, peer_spread=0.02, ratio=1.25, disagrees=True,
                likely_reason="contended" if contended else None, rooflab_rounds_ms=(1.2, 1.25, 1.3),
                peer_rounds_ms=(1.0, 1.0, 1.1), measured_at=datetime(2026, 3, 4, tzinfo=UTC), contended=contended,
                contention_reasons=("load average 9.00 above 2 logical CPUs",) if contended else (),
            ))
    before = crosscheck_frame(any_url).set_index("peer")
    assert bool(before.loc["torch", "contended"]) and not bool(before.loc["do_bench", "contended"])
    _downgrade_then_upgrade(any_url, "0005")
    after = crosscheck_frame(any_url).set_index("peer")
    assert list(after["ratio"]) == [1.25, 1.25] and list(after["likely_reason"].fillna("")) == ["contended", ""]
    assert not after["contended"].astype(bool).any()
    assert all(list(r) == [] for r in after["contention_reasons"])


def test_results_stored_before_revision_0009_read_as_back_to_back(any_url: str) -> None:
    """Every result measured before the pace existed ran back to back: the upgrade says so for ok
    rows (so a series does not start a new segment at the upgrade) and leaves the others empty; a
    result stored at head keeps its own pace."""
    from rooflab.record import with_columns
    from tests.db.factories import make_measurement

    run, env = make_run("paced"), make_env(5)
    with ResultStore(any_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        store.add_measurement(with_columns(make_measurement(run, make_case(1), env, rng=random.Random(1)), pace="idle"))
        store.add_measurement(make_measurement(run, make_case(2), env, rng=random.Random(2), status="failed"))
    engine = create_engine(normalize_url(any_url))
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0008")
    engine.dispose()
    assert read_state(any_url).kind == "older"
    assert runner.invoke(app, ["db", "upgrade", "--db", any_url]).exit_code == 0
    after = query.results(any_url).set_index("status")
    assert after.loc["ok", "pace"] == "back_to_back" and after["pace"].isna()["failed"]
    with ResultStore(any_url) as store:
        later = make_run("paced-later")
        store.start_run(later)
        store.add_environment(later.run_id, env)
        store.add_measurement(with_columns(make_measurement(later, make_case(1), env, rng=random.Random(3)),
                                           pace="idle"))
    latest = query.results(any_url, run_id="paced-later")
    assert list(latest["pace"]) == ["idle"]


def test_collectives_stored_before_revision_0010_read_as_isolated_with_their_real_pace(any_url: str) -> None:
    """Every collective measured before the modes existed was timed isolated, one call after a
    barrier per sample: the upgrade records its mode (whatever its status) and, where it was timed,
    the pace `barrier` instead of the `back_to_back` revision 0009 gave it; other results keep theirs.
    The downgrade gives 0009's pace back."""
    from rooflab.record import with_columns

    run, env = make_run("comms"), make_env(6)
    with ResultStore(any_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        store.add_measurement(with_columns(make_measurement(run, make_case(1), env, rng=random.Random(1)), ranks=2,
                                           pace="back_to_back"))
        store.add_measurement(with_columns(make_measurement(run, make_case(2), env, rng=random.Random(2),
                                                            status="crashed"), ranks=2))
        store.add_measurement(with_columns(make_measurement(run, make_case(3), env, rng=random.Random(3)),
                                           pace="back_to_back"))
    engine = create_engine(normalize_url(any_url))
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0009")
    assert runner.invoke(app, ["db", "upgrade", "--db", any_url]).exit_code == 0
    keys = [make_case(i).case_key for i in (1, 2, 3)]
    after = query.results(any_url).set_index("case_key").loc[keys]
    assert list(after["collective_mode"].fillna("-")) == ["isolated", "isolated", "-"]
    assert list(after["pace"].fillna("-")) == ["barrier", "-", "back_to_back"]
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0009")
        paces = sorted(str(p) for p in conn.execute(text("select pace from measurements")).scalars())
    engine.dispose()
    assert paces == ["None", "back_to_back", "back_to_back"]


def test_results_stored_before_revision_0011_keep_their_bytes_and_leave_the_split_unknown(any_url: str) -> None:
    """A result stored before bytes read and written were recorded keeps its total and gets no split
    (NULL, never one guessed from today's model); a result stored after the upgrade has its split. A
    counter reading stored before has no model split and no write-back caught. The downgrade drops
    the columns and keeps the totals."""
    run, env = make_run("split"), make_env(7)
    with ResultStore(any_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        old = make_measurement(run, make_case(1), env, rng=random.Random(5))
        store.add_measurement(old)
        add_counters(store, CounterRecord(
            run_id=run.run_id, case=make_case(1), device_fingerprint=env.device_fingerprint, device_uuid=None,
            cache="cold", timing_mode="launch", status="ok", measured_at=run.started_at, model_flops=10,
            model_bytes=3000, model_bytes_read=2000, model_bytes_written=1000, dram_read_bytes=2010,
            dram_write_bytes=990, caught_write_back_bytes=400, sweep_own_write_bytes=3))
    assert old.work.bytes_read is not None
    _downgrade_then_upgrade(any_url, "0010")
    (before,) = query.results(any_url).itertuples()
    assert before.bytes == old.work.bytes and before.bytes_read is None and before.bytes_written is None
    reading = counters_frame(any_url).iloc[0]
    assert reading["model_bytes"] == 3000 and reading["model_bytes_read"] is None
    assert reading["caught_write_back_bytes"] is None and reading["sweep_own_write_bytes"] is None
    with ResultStore(any_url) as store:
        later = make_run("split-later")
        store.start_run(later)
        store.add_environment(later.run_id, env)
        new = make_measurement(later, make_case(2), env, rng=random.Random(6))
        store.add_measurement(new)
    (after,) = query.results(any_url, run_id="split-later").itertuples()
    assert (after.bytes_read, after.bytes_written) == (new.work.bytes_read, new.work.bytes_written)
    assert after.bytes_read + after.bytes_written == after.bytes
    engine = create_engine(normalize_url(any_url))
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0010")
        totals = sorted(int(b) for b in conn.execute(text("select bytes from measurements")).scalars())
    engine.dispose()
    assert totals == sorted([old.work.bytes, new.work.bytes])
