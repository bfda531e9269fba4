"""`db merge` carries the cross-check rows and the layer profiles with their parts (ids remapped
to the target's), idempotently; the schema knows every own table; pruning and deleting runs keep
these rows consistent."""
from __future__ import annotations

import dataclasses
import json
import random
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import create_engine, delete, func, select, text
from typer.testing import CliRunner

from rooflab.db import models
from rooflab.db.crosscheck import CHECK_STATUSES, CrossCheckRecord, add_crosscheck, crosscheck_frame
from rooflab.db.engine import make_engine
from rooflab.db.errors import SchemaVersionError
from rooflab.db.layer_query import layer_profiles
from rooflab.db.models import Base
from rooflab.db.prune import prune_samples
from rooflab.db.schema import OWN_TABLES, read_state
from rooflab.db.store import ResultStore
from rooflab.record import CaseRecord, EnvironmentRecord, LayerPartRecord, LayerProfileRecord, RunRecord
from rooflab.runners.cli.app import app
from tests.db.factories import make_case, make_env, make_measurement, make_run

runner = CliRunner()


def _profile(rng: random.Random) -> LayerProfileRecord:
    names = (("norm1", "memory"), ("qkv", "matmul"), ("attention", "attention"), ("mlp_up", "matmul"))
    parts = tuple(
        LayerPartRecord(position=i, name=name, kind=kind, time_ms=rng.uniform(0.01, 2.0),
                        flops=rng.randint(1, 10**12), bytes=rng.randint(1, 10**10), events=rng.randint(1, 9))
        for i, (name, kind) in enumerate(names[: rng.randint(2, len(names))])
    )
    return LayerProfileRecord(clock=rng.choice(("cuda_kernels", "cpu_ops")), whole_ms=rng.uniform(5, 9),
                              gap_ms=rng.uniform(0.01, 1), unattributed_ms=rng.uniform(0.001, 0.1),
                              overlap_ms=rng.uniform(0, 0.01), host_ms=rng.uniform(9, 12),
                              events=sum(p.events for p in parts), parts=parts)


def _check(run: RunRecord, case: CaseRecord, env: EnvironmentRecord, peer: str, rng: random.Random) -> CrossCheckRecord:
    ours, theirs = rng.uniform(0.1, 3.0), rng.uniform(0.1, 3.0)
    return CrossCheckRecord(
        run_id=run.run_id, case=case, device_fingerprint=env.device_fingerprint, device_uuid=str(env.info["uuid"]),
        cache=case.case_key.split(":")[3], timing_mode=case.case_key.split(":")[4], peer=peer,
        peer_version=f"{rng.randint(1, 9)}.{rng.randint(0, 99)}", status=rng.choice(CHECK_STATUSES),
        error=None if rng.random() < 0.5 else f"planted {rng.random():.6f}", peer_cache="cold",
        peer_clock="cuda_events",
        rounds=rng.randint(2, 9), rooflab_median_ms=ours, rooflab_spread=rng.uniform(0.001, 0.1),
        peer_median_ms=theirs, peer_spread=rng.uniform(0.001, 0.1), ratio=ours / theirs,
        disagrees=rng.random() < 0.5, likely_reason=rng.choice((None, "cache", "clock")),
        rooflab_rounds_ms=tuple(rng.uniform(0.1, 3.0) for _ in range(3)),
        peer_rounds_ms=tuple(rng.uniform(0.1, 3.0) for _ in range(3)),
        measured_at=run.started_at + timedelta(seconds=rng.randint(1, 999), microseconds=rng.randint(1, 999_999)),
    )


def _node(path: Path, run_id: str, env_index: int, cases: range, rng: random.Random) -> str:
    """A node-local file: a benchmark run (every other measurement profiled) and a cross-check run."""
    url = f"sqlite:///{path}"
    run, check_run, env = make_run(run_id, rng=rng), make_run(f"{run_id}-xc", rng=rng), make_env(env_index)
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run_id, env)
        for i in cases:
            m = make_measurement(run, make_case(i), env, rng=rng)
            if i % 2 == 0:
                m = dataclasses.replace(m, layer_profile=_profile(rng))
            assert store.add_measurement(m)
        store.finish_run(run_id, "complete")
        store.start_run(check_run)
        store.add_environment(check_run.run_id, env)
        for i in cases:  # cross-check cases with no measurement anywhere, and one that the run measured
            for peer in ("torch", "triton_do_bench"):
                assert add_crosscheck(store, _check(check_run, make_case(100 + i), env, peer, rng))
        assert add_crosscheck(store, _check(run, make_case(cases[0]), env, "torch", rng))
        store.finish_run(check_run.run_id, "complete")
    return url


_PROFILE_KEY = ["run_id", "case_key", "device_fingerprint", "cache", "timing_mode"]


def _profiles(url: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Profiles and parts keyed by what they measure, not by the database's ids."""
    profiles, parts = layer_profiles(url)
    keys = profiles.set_index("measurement_id")[_PROFILE_KEY]
    parts = parts.join(keys, on="measurement_id").drop(columns=["measurement_id"])
    profiles = profiles.drop(columns=["measurement_id", "run_order"])
    return (profiles.sort_values(_PROFILE_KEY).reset_index(drop=True),
            parts.sort_values([*_PROFILE_KEY, "position"]).reset_index(drop=True))


def _checks(url: str) -> pd.DataFrame:
    return crosscheck_frame(url).sort_values(["run_id", "case_key", "peer"]).reset_index(drop=True)


def _count(url: str, table: type[Base]) -> int:
    engine = make_engine(url, write=False)
    with engine.connect() as conn:
        n = conn.scalar(select(func.count()).select_from(table.__table__))
    engine.dispose()
    return int(n or 0)


def test_merge_carries_crosschecks_and_layer_profiles_once(any_url: str, tmp_path: Path) -> None:
    rng = random.Random()
    a = _node(tmp_path / "a.db", "night-a", 0, range(0, 9), rng)
    b = _node(tmp_path / "b.db", "night-b", 1, range(5, 12), rng)
    # the target already holds other rows, so that its ids differ from every source's
    with ResultStore(any_url) as store:
        run, env = make_run("earlier", rng=rng), make_env(7)
        store.start_run(run)
        store.add_environment(run.run_id, env)
        for i in (40, 41, 42):
            store.add_measurement(dataclasses.replace(make_measurement(run, make_case(i), env, rng=rng),
                                                      layer_profile=_profile(rng)))
        add_crosscheck(store, _check(run, make_case(40), env, "torch", rng))
        store.finish_run(run.run_id, "complete")
    before_profiles, before_parts = _profiles(any_url)

    result = runner.invoke(app, ["db", "merge", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "--db", any_url,
                                 "--json"])
    assert result.exit_code == 0, result.output
    added = json.loads(result.output)
    assert [r["crosschecks_added"] for r in added] == [19, 15]
    assert [r["layer_profiles_added"] for r in added] == [5, 3]

    merged_profiles, merged_parts = _profiles(any_url)
    sources = [_profiles(u) for u in (a, b)]
    expected_profiles = pd.concat([before_profiles, *(p for p, _ in sources)]).sort_values(_PROFILE_KEY)
    expected_parts = pd.concat([before_parts, *(p for _, p in sources)]).sort_values([*_PROFILE_KEY, "position"])
    pd.testing.assert_frame_equal(merged_profiles, expected_profiles.reset_index(drop=True), check_dtype=False)
    pd.testing.assert_frame_equal(merged_parts, expected_parts.reset_index(drop=True), check_dtype=False)
    assert len(merged_profiles) == 3 + 5 + 3 and len(merged_parts) > len(merged_profiles)

    merged_checks = _checks(any_url)
    expected_checks = pd.concat([_checks(u) for u in (a, b)])
    expected_checks = expected_checks.sort_values(["run_id", "case_key", "peer"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(merged_checks[merged_checks["run_id"] != "earlier"].reset_index(drop=True),
                                  expected_checks, check_dtype=False)
    engine = make_engine(any_url, write=False)  # the per-round medians travel too
    with engine.connect() as conn:
        rounds = dict(conn.execute(select(models.Run.run_id + "|" + models.Case.case_key + "|" + models.CrossCheck.peer,
                                          models.CrossCheck.peer_rounds_ms)
                                   .join(models.Run, models.Run.id == models.CrossCheck.run_id)
                                   .join(models.Case, models.Case.id == models.CrossCheck.case_id)).all())
    engine.dispose()
    for url in (a, b):
        src = make_engine(url, write=False)
        with src.connect() as conn:
            for key, values in conn.execute(
                select(models.Run.run_id + "|" + models.Case.case_key + "|" + models.CrossCheck.peer,
                       models.CrossCheck.peer_rounds_ms)
                .join(models.Run, models.Run.id == models.CrossCheck.run_id)
                .join(models.Case, models.Case.id == models.CrossCheck.case_id)
            ):
                assert rounds[key] == values
        src.dispose()

    counts = {t: _count(any_url, t) for t in (models.CrossCheck, models.LayerProfile, models.LayerPart)}
    again = runner.invoke(app, ["db", "merge", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "--db", any_url,
                                "--json"])
    assert again.exit_code == 0, again.output
    assert [(r["crosschecks_added"], r["layer_profiles_added"]) for r in json.loads(again.output)] == [(0, 0), (0, 0)]
    assert {t: _count(any_url, t) for t in counts} == counts


def test_merge_fills_in_the_profiles_a_target_lacks_for_the_same_measurement(sqlite_url: str, tmp_path: Path) -> None:
    """A target merged before profiles travelled holds the measurements without them: merging
    again adds the profiles (and their parts) to those same measurements."""
    rng = random.Random()
    a = _node(tmp_path / "a.db", "night-a", 0, range(0, 8), rng)
    assert runner.invoke(app, ["db", "merge", str(tmp_path / "a.db"), "--db", sqlite_url]).exit_code == 0
    engine = make_engine(sqlite_url, write=True)
    with engine.begin() as conn:
        conn.execute(delete(models.LayerPart.__table__))
        conn.execute(delete(models.LayerProfile.__table__))
    engine.dispose()
    result = runner.invoke(app, ["db", "merge", str(tmp_path / "a.db"), "--db", sqlite_url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["layer_profiles_added"] == 4
    assert json.loads(result.output)[0]["measurements_added"] == 0
    for got, want in zip(_profiles(sqlite_url), _profiles(a), strict=True):
        pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_a_database_holding_only_newer_rooflab_tables_is_foreign(tmp_path: Path) -> None:
    """Without alembic_version, any rooflab table (the newer ones too) marks the file foreign."""
    assert OWN_TABLES == frozenset(Base.metadata.tables)
    for table in ("crosschecks", "layer_profiles", "layer_parts", "run_shards"):
        path = tmp_path / f"{table}.db"
        engine = create_engine(f"sqlite:///{path}")
        with engine.begin() as conn:
            conn.execute(text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY)"))
        engine.dispose()
        assert read_state(f"sqlite:///{path}").kind == "foreign", table
        with pytest.raises(SchemaVersionError):
            ResultStore(f"sqlite:///{path}")


def test_pruning_samples_keeps_layer_rows_and_deleting_a_run_takes_them_along(any_url: str, tmp_path: Path) -> None:
    """Samples go alone; a run deleted with foreign keys on takes its measurements, their layer
    profiles and parts, and its cross-checks with it (ON DELETE CASCADE), and nothing else."""
    rng = random.Random()
    _node(tmp_path / "a.db", "night-a", 0, range(0, 6), rng)
    _node(tmp_path / "b.db", "night-b", 1, range(0, 6), rng)
    assert runner.invoke(app, ["db", "merge", str(tmp_path / "a.db"), str(tmp_path / "b.db"),
                               "--db", any_url]).exit_code == 0
    tables = (models.CrossCheck, models.LayerProfile, models.LayerPart, models.Measurement)
    counts = {t: _count(any_url, t) for t in tables}
    kept_profiles, kept_parts = (frame[frame["run_id"] == "night-b"].reset_index(drop=True)
                                 for frame in _profiles(any_url))
    assert len(kept_profiles) == 3 and len(kept_parts) >= 6
    result = prune_samples(any_url, timedelta(days=1))
    assert result.measurements == 12 and _count(any_url, models.Sample) == 0
    assert {t: _count(any_url, t) for t in tables} == counts

    engine = make_engine(any_url, write=True)  # foreign keys on, as every rooflab connection
    with engine.begin() as conn:
        conn.execute(delete(models.Run.__table__).where(models.Run.run_id.in_(["night-a", "night-a-xc"])))
    engine.dispose()
    profiles, parts = _profiles(any_url)
    pd.testing.assert_frame_equal(profiles, kept_profiles)
    pd.testing.assert_frame_equal(parts, kept_parts)
    assert _count(any_url, models.LayerPart) == len(kept_parts)
    assert set(crosscheck_frame(any_url)["run_id"]) == {"night-b", "night-b-xc"}
    assert _count(any_url, models.CrossCheck) == counts[models.CrossCheck] // 2
