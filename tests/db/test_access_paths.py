"""The indexes of the ways into a fleet's results (device, case, run order), checked with EXPLAIN on a
small simulated fleet in PostgreSQL (tests/perf/access_paths.py; the year's plans: docs/database.md)."""
from __future__ import annotations

import random

import pytest
from sqlalchemy import create_engine, text

from rooflab.db.urls import normalize_url
from tests.perf.access_paths import explain, sample_params
from tests.perf.fleet_year import FleetYear, write_year

pytestmark = pytest.mark.postgres


def test_each_access_path_reads_its_index_and_finds_its_rows(postgres_url: str) -> None:
    # one size, fresh figures: on a table this small two indexes that fit a query cost about the same,
    # and with random sizes and no statistics the planner took the other in 2 of 7 runs
    year = FleetYear(devices=4, cases=30, nights=8, gpus_per_node=2, seed=random.randint(0, 1000))
    write_year(postgres_url, year, progress=lambda line: None)
    engine = create_engine(normalize_url(postgres_url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))  # the planner's statistics, as a database that has been up a while has them
    engine.dispose()
    back = 3
    plans = {p.name: p for p in explain(postgres_url, sample_params(postgres_url, back), no_seqscan=True)}
    assert {name: p.expected for name, p in plans.items() if not p.uses_expected} == {}
    rows = {name.split(" (")[0]: p.rows for name, p in plans.items()}
    assert rows == {"one series in run order": year.nights, "a device's results since a run": year.cases * back,
                    "a case on one model in run order": year.devices * year.nights,
                    "one night": year.devices * year.cases, "the newest nights": year.devices * year.cases * back}
