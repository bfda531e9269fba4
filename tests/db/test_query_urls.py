"""Query API (columns, run order, history) and URL handling (psycopg mapping, password redaction)."""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pandas as pd
import pytest
from typer.testing import CliRunner

from rooflab.db import query
from rooflab.db.columns import EXPORT_COLUMNS
from rooflab.db.errors import DatabaseInputError
from rooflab.db.store import ResultStore
from rooflab.db.urls import normalize_url, redact
from rooflab.runners.cli.app import app
from tests.db.factories import T0, make_case, make_env, make_measurement, make_run
from tests.db.pg import BACKENDS, backend_url

runner = CliRunner()
PLAN_EXTRAS = ("timing_mode", "stop_reason", "throttled", "device_uuid", "op_version", "mean_ms", "min_ms", "max_ms",
               "iqr_ms", "std_ms", "rel_ci_halfwidth", "first_call_ms", "measured_at", "l2_bytes", "memory_bytes",
               "sm_count", "compute_capability", "shard", "run_order")


def test_history_is_ordered_by_run_not_by_insertion_or_measured_at(any_url: str) -> None:
    rng = random.Random()
    env_a, env_b = make_env(0), make_env(1, name="NVIDIA A100")
    case = make_case(2)
    days = [5, 1, 3, 0, 4, 2]  # inserted out of order
    medians = {}
    with ResultStore(any_url) as store:
        for day in days:
            run = replace(make_run(f"n{day}", rng=rng), started_at=T0 + timedelta(days=day))
            store.start_run(run)
            for env in (env_a, env_b):
                store.add_environment(run.run_id, env)
                m = make_measurement(run, case, env, rng=rng)
                # measured_at deliberately runs backwards against the run order
                m = replace(m, identity=replace(m.identity, measured_at=T0 + timedelta(days=30 - day)))
                store.add_measurement(m)
                medians[(day, env.device_fingerprint)] = m.median_ms
    history = query.case_history(any_url, case.case_key, env_a.device_fingerprint)
    assert list(history["run_id"]) == [f"n{d}" for d in range(6)]
    assert list(history["run_order"]) == [1, 2, 3, 4, 5, 6]
    assert list(history["median_ms"]) == [medians[(d, env_a.device_fingerprint)] for d in range(6)]
    both = query.case_history(any_url, case.case_key)
    assert len(both) == 12 and list(both["run_order"]) == sorted(both["run_order"])
    frame = query.results(any_url)
    assert list(frame.columns[: len(EXPORT_COLUMNS)]) == list(EXPORT_COLUMNS)
    assert set(PLAN_EXTRAS) <= set(frame.columns)
    assert len(query.results(any_url, device="NVIDIA A100")) == 6
    assert len(query.results(any_url, since=T0 + timedelta(days=4))) == 4
    assert len(query.results(any_url, status=["failed"])) == 0
    envs = query.environments(any_url)
    assert set(envs["device_fingerprint"]) == {env_a.device_fingerprint, env_b.device_fingerprint}
    assert set(envs["n_runs"]) == {6}
    runs = query.runs(any_url)
    assert list(runs["run_id"]) == [f"n{d}" for d in range(6)] and list(runs["n_measurements"]) == [2] * 6


def _varied_history(url: str) -> None:
    """Three runs (stored out of order) x two devices x four cases, some failed, some throttled."""
    rng = random.Random(5)
    envs = (make_env(0), make_env(1, name="NVIDIA A100"))
    with ResultStore(url) as store:
        for day in (2, 0, 1):
            run = replace(make_run(f"v{day}", rng=rng), started_at=T0 + timedelta(days=day))
            store.start_run(run)
            for env in envs:
                store.add_environment(run.run_id, env)
                for i in range(4):
                    status = "failed" if (i, day) == (3, 1) else "ok"
                    store.add_measurement(make_measurement(run, make_case(i), env, rng=rng, status=status))


@pytest.fixture(scope="module", params=BACKENDS)
def varied_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`_varied_history` stored once per backend for the column-subset tests, which only read it."""
    with backend_url(request.param, tmp_path_factory.mktemp("varied")) as url:
        _varied_history(url)
        yield url


@pytest.mark.parametrize("columns", [
    ["run_order"],
    ["params", "throttle_reasons", "measured_at", "started_at", "finished_at", "throttled", "git_dirty"],
    ["median_ms", "case_key", "run_order", "device_fingerprint", "status", "error"],
    list(reversed(query.RESULT_COLUMNS)),
])
def test_a_column_subset_equals_those_columns_of_the_full_frame(varied_url: str, columns: list[str]) -> None:
    full = query.results(varied_url)
    assert len(full) == 24 and full["throttled"].any() and (full["status"] == "failed").any()
    pd.testing.assert_frame_equal(query.results(varied_url, columns=columns), full[columns], check_exact=True)
    for kw in ({"run_id": "v1"}, {"device": "NVIDIA A100"}, {"status": "ok"}, {"case_key": make_case(2).case_key}):
        pd.testing.assert_frame_equal(query.results(varied_url, columns=columns, **kw),
                                      query.results(varied_url, **kw)[columns], check_exact=True)


def test_unknown_result_columns_are_refused(sqlite_url: str) -> None:
    _varied_history(sqlite_url)
    with pytest.raises(DatabaseInputError, match="unknown result column.*median"):
        query.results(sqlite_url, columns=["case_key", "median"])
    with pytest.raises(DatabaseInputError, match="at least one"):
        query.results(sqlite_url, columns=[])


def test_reading_a_database_that_does_not_exist_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(DatabaseInputError, match="no rooflab database"):
        query.results(f"sqlite:///{tmp_path / 'absent.db'}")
    assert not (tmp_path / "absent.db").exists()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://bench:s3cr3t@db.example:5432/rooflab", "postgresql://bench:***@db.example:5432/rooflab"),
        ("postgresql+psycopg://u:p%40ss@h/d", "postgresql+psycopg://u:***@h/d"),
        ("sqlite:///results.db", "sqlite:///results.db"),
        ("weird://user:hunter2@", "weird://user:***@"),
    ],
)
def test_redact_hides_passwords(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_postgres_urls_use_psycopg_3() -> None:
    assert normalize_url("postgresql://u@h/d").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/d").drivername == "postgresql+psycopg"
    assert normalize_url("results.db").drivername == "sqlite"
    for bad in ("sqlite://", "sqlite:///:memory:", "mysql://u:topsecret@h/d", ""):
        with pytest.raises(DatabaseInputError) as info:
            normalize_url(bad)
        assert "topsecret" not in str(info.value)


def test_no_command_prints_the_password(tmp_path) -> None:
    url = "postgresql://rooflab:TopSecret42@127.0.0.1:1/nowhere"  # nothing listens on port 1
    (tmp_path / "x.csv").write_text(",".join(EXPORT_COLUMNS) + "\n")
    for argv in (
        ["db", "upgrade", "--db", url],
        ["db", "current", "--db", url],
        ["export", "--format", "csv", "--db", url],
        ["import", str(tmp_path / "x.csv"), "--db", url],
        ["db", "prune", "--samples-older-than", "90d", "--db", url],
        ["db", "merge", str(tmp_path / "x.db"), "--db", url],
    ):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "TopSecret42" not in result.output, argv
    shown = runner.invoke(app, ["db", "current", "--db", url])
    assert "rooflab:***@127.0.0.1:1/nowhere" in " ".join(shown.output.split())
