"""The indexes of the ways into a fleet's results (device, case, run order), checked with EXPLAIN on a
small simulated fleet in PostgreSQL (tests/perf/access_paths.py; the year's plans: docs/database.md)."""
from __future__ import annotations

import random

import pytest

from tests.perf.access_paths import explain, sample_params
from tests.perf.fleet_year import FleetYear, write_year

pytestmark = pytest.mark.postgres


def test_each_access_path_reads_its_index_and_finds_its_rows(postgres_url: str) -> None:
    year = FleetYear(devices=random.randint(3, 6), cases=random.randint(20, 40), nights=random.randint(6, 9),
                     gpus_per_node=2, seed=random.randint(0, 1000))
    write_year(postgres_url, year, progress=lambda line: None)
    back = random.randint(2, year.nights - 1)
    plans = {p.name: p for p in explain(postgres_url, sample_params(postgres_url, back), no_seqscan=True)}
    assert {name: p.expected for name, p in plans.items() if not p.uses_expected} == {}
    rows = {name.split(" (")[0]: p.rows for name, p in plans.items()}
    assert rows == {"one series in run order": year.nights, "a device's results since a run": year.cases * back,
                    "a case on one model in run order": year.devices * year.nights,
                    "one night": year.devices * year.cases, "the newest nights": year.devices * year.cases * back}
