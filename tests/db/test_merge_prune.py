"""`db merge` of node-local files (with samples, idempotent) and `db prune` of old samples."""
from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from rooflab.db import models, query
from rooflab.db.engine import make_engine
from rooflab.db.prune import prune_samples
from rooflab.db.samples import unpack
from rooflab.db.store import ResultStore
from rooflab.runners.cli.app import app
from tests.db.factories import make_case, make_env, make_measurement, make_run

runner = CliRunner()


def _samples(url: str) -> dict[tuple[str, str, str], tuple[float, ...]]:
    engine = make_engine(url, write=False)
    m, c, r, s = models.Measurement, models.Case, models.Run, models.Sample
    with engine.connect() as conn:
        rows = conn.execute(
            select(r.run_id, c.case_key, m.device_key, s.count, s.values_f64le)
            .join(m, m.id == s.measurement_id).join(c, c.id == m.case_id).join(r, r.id == m.run_id)
        ).all()
    engine.dispose()
    return {(run_id, key, dev): unpack(blob, count) for run_id, key, dev, count, blob in rows}


def _node_file(path: Path, run_id: str, shard: str, cases: range, env_index: int, seed: int) -> str:
    url = f"sqlite:///{path}"
    run = make_run(run_id, rng=random.Random(seed))
    env = make_env(env_index)
    rng = random.Random()
    with ResultStore(url) as store:
        store.start_run(run, shard=shard)
        store.add_environment(run_id, env)
        for i in cases:
            store.add_measurement(make_measurement(run, make_case(i), env, rng=rng, shard=shard))
        store.finish_run(run_id, "complete", shard=shard)
    return url


def test_merge_node_files_with_samples_is_idempotent(any_url: str, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    a = _node_file(tmp_path / "node-a.db", "nightly-1", "0/2", range(0, 30), 0, seed)
    b = _node_file(tmp_path / "node-b.db", "nightly-1", "1/2", range(30, 55), 1, seed)
    c = _node_file(tmp_path / "node-c.db", "nightly-0", "0/1", range(0, 10), 0, seed + 1)
    files = [str(tmp_path / name) for name in ("node-a.db", "node-b.db", "node-c.db")]
    result = runner.invoke(app, ["db", "merge", *files, "--db", any_url, "--json"])
    assert result.exit_code == 0, result.output
    assert [r["measurements_added"] for r in json.loads(result.output)] == [30, 25, 10]

    expected = {**_samples(a), **_samples(b), **_samples(c)}
    assert _samples(any_url) == expected and len(expected) == 65
    merged = (query.results(any_url).drop(columns=["run_order"]).sort_values(["run_id", "case_key"])
              .reset_index(drop=True))
    separate = [query.results(u).drop(columns=["run_order"]) for u in (a, b, c)]
    import pandas as pd

    combined = pd.concat(separate).sort_values(["run_id", "case_key"]).reset_index(drop=True)
    for column in ("median_ms", "p90_ms", "tflops", "status", "device_fingerprint", "shard", "measured_at"):
        assert merged[column].equals(combined[column]), column
    runs = query.runs(any_url).set_index("run_id")
    assert runs.loc["nightly-1", "status"] == "complete" and runs.loc["nightly-1", "n_shards_finished"] == 2
    with ResultStore(any_url) as store:
        stored = store.get_run("nightly-1")
        assert stored is not None and stored.spec_text == make_run("nightly-1", rng=random.Random(seed)).spec_text
    assert len(query.environments(any_url)) == 2

    again = runner.invoke(app, ["db", "merge", *files, "--db", any_url, "--json"])
    assert again.exit_code == 0
    assert [r["measurements_added"] for r in json.loads(again.output)] == [0, 0, 0]
    assert len(query.results(any_url)) == 65


def test_merge_refuses_a_missing_source_and_the_target_itself(tmp_path: Path) -> None:
    target = tmp_path / "all.db"
    ResultStore(f"sqlite:///{target}").close()
    for argv in (["db", "merge", str(tmp_path / "nope.db"), "--db", str(target)],
                 ["db", "merge", str(target), "--db", f"sqlite:///{target}"]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, result.output


def test_prune_removes_old_samples_and_keeps_summaries(any_url: str) -> None:
    rng = random.Random()
    now = datetime.now(UTC)
    env = make_env(0)
    ages = {"old-1": 200, "old-2": 100, "recent": 10}
    with ResultStore(any_url) as store:
        for run_id, age in ages.items():
            run = make_run(run_id, rng=rng)
            run = type(run)(**{**run.__dict__, "started_at": now - timedelta(days=age)})
            store.start_run(run)
            store.add_environment(run_id, env)
            for i in range(8):
                store.add_measurement(make_measurement(run, make_case(i), env, rng=rng, n_samples=20))
    before = query.results(any_url)
    dry = prune_samples(any_url, timedelta(days=90), dry_run=True)
    assert (dry.runs, dry.measurements, dry.sample_values, dry.bytes) == (2, 16, 320, 320 * 8)
    assert len(_samples(any_url)) == 24
    done = prune_samples(any_url, timedelta(days=90), vacuum=True)
    assert (done.runs, done.measurements) == (2, 16)
    left = _samples(any_url)
    assert {run_id for run_id, _, _ in left} == {"recent"} and len(left) == 8
    after = query.results(any_url)
    assert before.equals(after)  # every summary kept
    assert prune_samples(any_url, timedelta(days=90)).measurements == 0


def test_prune_cli_validates_the_duration(sqlite_url: str) -> None:
    ResultStore(sqlite_url).close()
    for bad in ("90", "90 days", "-5d", "0d", "d", "1m", "3x"):
        result = runner.invoke(app, ["db", "prune", "--samples-older-than", bad, "--db", sqlite_url])
        assert result.exit_code == 2, (bad, result.output)
        assert "--samples-older-than" in result.output
    ok = runner.invoke(app, ["db", "prune", "--samples-older-than", "12w", "--dry-run", "--db", sqlite_url])
    assert ok.exit_code == 0 and "would remove raw samples of 0 measurements" in ok.output


def _runs_aged(url: str, ages_days: dict[str, float]) -> None:
    rng = random.Random()
    now = datetime.now(UTC)
    env = make_env(0)
    with ResultStore(url) as store:
        for run_id, age in ages_days.items():
            run = make_run(run_id, rng=rng)
            run = type(run)(**{**run.__dict__, "started_at": now - timedelta(days=age)})
            store.start_run(run)
            store.add_environment(run_id, env)
            for i in range(3):
                store.add_measurement(make_measurement(run, make_case(i), env, rng=rng, n_samples=10))


@pytest.mark.parametrize(
    "text, expected",
    [("45s", timedelta(seconds=45)), ("30min", timedelta(minutes=30)), ("36h", timedelta(hours=36)),
     ("90d", timedelta(days=90)), ("12w", timedelta(weeks=12)), ("1mo", timedelta(days=30)),
     ("6MO", timedelta(days=180)), ("1y", timedelta(days=365))],
)
def test_durations_have_unambiguous_units(text: str, expected: timedelta) -> None:
    from rooflab.db.timeparse import parse_duration

    assert parse_duration(text) == expected


def test_prune_refuses_m_and_names_the_alternatives(sqlite_url: str) -> None:
    _runs_aged(sqlite_url, {"old": 45, "new": 0.0001})
    result = runner.invoke(app, ["db", "prune", "--samples-older-than", "1m", "--yes", "--db", sqlite_url])
    assert result.exit_code == 2, result.output
    assert "ambiguous" in result.output and "1min" in result.output and "1mo" in result.output
    assert len(_samples(sqlite_url)) == 6  # nothing removed


def test_prune_shows_what_would_go_and_asks(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooflab.runners.cli import db_cmd

    _runs_aged(sqlite_url, {"old-a": 400, "old-b": 40, "recent": 2})
    # stdin not a terminal and no --yes: refused, the plan shown, nothing removed
    refused = runner.invoke(app, ["db", "prune", "--samples-older-than", "1mo", "--db", sqlite_url])
    assert refused.exit_code == 2, refused.output
    assert "--yes" in refused.output and "would remove raw samples of 6 measurements" in refused.output
    assert len(_samples(sqlite_url)) == 9
    # at a terminal: the plan, the runs, a question; "n" keeps everything
    monkeypatch.setattr(db_cmd, "_interactive", lambda: True)
    declined = runner.invoke(app, ["db", "prune", "--samples-older-than", "1mo", "--db", sqlite_url], input="n\n")
    assert declined.exit_code == 1, declined.output
    assert "runs: old-a, old-b" in declined.output and "Remove them?" in declined.output
    assert "nothing removed" in declined.output and len(_samples(sqlite_url)) == 9
    accepted = runner.invoke(app, ["db", "prune", "--samples-older-than", "1mo", "--db", sqlite_url], input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "removed raw samples of 6 measurements" in accepted.output
    assert {run_id for run_id, _, _ in _samples(sqlite_url)} == {"recent"}
    # --yes does not ask
    monkeypatch.setattr(db_cmd, "_interactive", lambda: False)
    yes = runner.invoke(app, ["db", "prune", "--samples-older-than", "1d", "--yes", "--db", sqlite_url])
    assert yes.exit_code == 0 and "removed raw samples of 3 measurements" in yes.output, yes.output
    assert _samples(sqlite_url) == {}


def test_prune_of_a_database_that_is_not_there_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    result = runner.invoke(app, ["db", "prune", "--samples-older-than", "90d", "--yes", "--db", str(missing)])
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not missing.exists()
