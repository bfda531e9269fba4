"""The fleet benchmark's small form (tests/perf/bench_fleet.py) on the tests' PostgreSQL: every step
runs in processes of its own and does its work (not timed here: its figures are docs/database.md's)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from rooflab.db.urls import normalize_url
from tests.perf import bench_fleet
from tests.perf.access_paths import ACCESS_PATHS

pytestmark = pytest.mark.postgres


def test_the_small_fleet_benchmark_runs_every_step(postgres_url: str, tmp_path: Path) -> None:
    devices, cases, nights = 16, random.randint(30, 50), 10
    out = tmp_path / "fleet.json"
    code = bench_fleet.main(["--postgres", postgres_url, "--devices", str(devices), "--cases", str(cases),
                             "--nights", str(nights), "--json", str(out), "--workdir", str(tmp_path / "work"),
                             "--seed", str(random.randint(0, 99))])
    assert code == 0
    figures = json.loads(out.read_text())
    steps = figures["steps"]
    assert list(steps) == list(bench_fleet.STEPS) and figures["results"] == devices * cases * nights
    ran = {name: s for name, s in steps.items() if not (name == "fleet" and "no `rooflab fleet`" in s["note"])}
    assert all(s["seconds"] > 0 and s["peak_mb"] > 0 for s in ran.values()), steps
    night = devices * cases
    assert (steps["ingest_night"]["count"], steps["import_night"]["count"]) == (night, night)
    assert steps["export"]["count"] == devices * cases * nights
    assert steps["regressions"]["count"] >= cases and steps["report"]["count"] > 0
    assert [p["expected"] for p in figures["access_paths"]] == [p.index for p in ACCESS_PATHS]
    engine = create_engine(normalize_url(postgres_url))
    with engine.connect() as conn:  # the night the ingest steps wrote is gone again: the year as generated
        held = conn.execute(text("SELECT count(*), count(DISTINCT run_id) FROM measurements")).one()
    engine.dispose()
    assert tuple(held) == (devices * cases * nights, nights)
