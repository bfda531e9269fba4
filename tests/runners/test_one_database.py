"""One database handle per command: `rooflab run` and `rooflab nightly` open one engine each.

The engine factory (sqlalchemy's create_engine, as db.engine calls it) is wrapped to count the
engines a command opens in this process (the workers never touch the database), and the URL
parser (db.urls.normalize_url, wherever it was imported) to count how often the URL is parsed.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from rooflab.db import engine as engine_module
from rooflab.db.query import results
from rooflab.runners.cluster.nightly import NightlyOptions, nightly
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.session import run_suite
from tests.runners.test_run_cli import PLANTED_SPEC, PLUGIN, write


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    import sys

    from rooflab.db import urls

    seen = {"engines": 0, "parses": 0}
    real_create, real_normalize = engine_module.create_engine, urls.normalize_url

    def create_engine(*args, **kwargs):
        seen["engines"] += 1
        return real_create(*args, **kwargs)

    def normalize_url(*args, **kwargs):
        seen["parses"] += 1
        return real_normalize(*args, **kwargs)

    monkeypatch.setattr(engine_module, "create_engine", create_engine)
    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "").startswith("rooflab.")
                and getattr(module, "normalize_url", None) is real_normalize):
            monkeypatch.setattr(module, "normalize_url", normalize_url)
    return seen


def _reset(seen: dict[str, int]) -> None:
    seen["engines"] = seen["parses"] = 0


def test_one_run_opens_one_engine_and_parses_its_url_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          counted: dict[str, int]) -> None:
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)
    spec = write(tmp_path, "planted.yaml", PLANTED_SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    options = RunOptions(device="cpu", quiet=True, run_id="night", filters=("n=256", "n=512"), lock=False)

    first = run_suite(spec, db=url, options=options, handle_signals=False)  # creates the database
    assert first.counts["ok"] == 2
    assert counted == {"engines": 1, "parses": 1}

    # a shard of a resumed run on a database that holds results: the resume check, the shard's cost
    # basis (earlier medians), the store and the coverage check all read through the same handle
    _reset(counted)
    rest = run_suite(spec, db=url,
                     options=RunOptions(device="cpu", quiet=True, resume="night", shard="0/1", lock=False),
                     handle_signals=False)
    assert rest.counts["ok"] == 2 and rest.already_measured == 2
    assert counted == {"engines": 1, "parses": 1}
    assert len(results(url, run_id="night")) == 4


def test_one_nightly_opens_one_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: dict[str, int]) -> None:
    """Run, history check and HTML report of a night, all on one engine."""
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)
    spec = write(tmp_path, "planted.yaml", PLANTED_SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    run = RunOptions(device="cpu", run_id="n1", filters=("n=256",), lock=False)
    summary = nightly(str(spec), db=url, options=NightlyOptions(tmp_path / "out", run=run))
    assert summary.run_status == "partial" and summary.counts["ok"] == 1 and summary.report is not None
    assert counted == {"engines": 1, "parses": 1}
    _reset(counted)
    again = nightly(str(spec), db=url,
                    options=NightlyOptions(tmp_path / "out", skip_run=True, run=RunOptions(run_id="n1")))
    assert again.counts == summary.counts and again.report_error is None
    assert counted == {"engines": 1, "parses": 1}


def test_reads_through_the_handle_do_not_wait_for_a_writer(tmp_path: Path) -> None:
    """The handle reads with a plain BEGIN: a writer holding the SQLite write lock does not block it."""
    import sqlite3
    import time

    from rooflab.db.handle import Database
    from rooflab.db.query import run_ids
    from rooflab.db.store import ResultStore
    from tests.db.factories import make_run

    path = tmp_path / "r.db"
    with ResultStore(f"sqlite:///{path}") as store:
        store.start_run(make_run("r1"))
    writer = sqlite3.connect(path, isolation_level=None, timeout=0.1)
    writer.execute("BEGIN IMMEDIATE")  # another process in the middle of a write transaction
    try:
        with Database(f"sqlite:///{path}") as database:
            started = time.monotonic()
            assert run_ids(database) == ["r1"]
            assert time.monotonic() - started < 5.0  # the busy timeout is 30 s
    finally:
        writer.execute("ROLLBACK")
        writer.close()
