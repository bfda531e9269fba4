"""The indexes of the ways into a fleet's results (device, case, run order), checked with EXPLAIN on a
small simulated fleet in PostgreSQL (tests/perf/access_paths.py; the year's plans: docs/database.md)."""
from __future__ import annotations

import dataclasses
import random

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from rooflab.db.store import ResultStore
from rooflab.db.urls import normalize_url
from tests.perf.access_paths import explain, sample_params
from tests.perf.fleet_year import (
    FleetYear,
    case_table,
    environment,
    host,
    run_id,
    run_record,
    shard_records,
    write_year,
)

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


def _dirty_pages(conn, index: str) -> int:  # noqa: ANN001 - a SQLAlchemy connection
    return int(conn.execute(text(
        "SELECT count(*) FROM pg_buffercache WHERE isdirty AND reldatabase = "
        "(SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND relfilenode = pg_relation_filenode(:index)"), {"index": index}).scalar_one())


def test_a_nights_results_go_to_the_end_of_each_devices_part_of_the_device_index(postgres_url: str) -> None:
    # A night's writes dirty the device index's pages; in (device, case, run) order every series had its
    # own place in it, a page for every few series, which on a fleet's year meant reading and writing
    # 128,000 pages a night (docs/database.md). In run order the night goes to each device's end.
    year = FleetYear(devices=8, cases=random.randint(180, 240), nights=12, gpus_per_node=4,
                     seed=random.randint(0, 1000))
    write_year(postgres_url, year, progress=lambda line: None)
    engine = create_engine(normalize_url(postgres_url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        try:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_buffercache"))
        except DBAPIError as exc:  # a server without PostgreSQL's contrib modules, or a role that may not
            pytest.skip(f"pg_buffercache is not available on this server: {exc.orig}")
        conn.execute(text("CHECKPOINT"))  # every page clean: what the night dirties is what it wrote
        leaves = int(conn.execute(text("SELECT pg_relation_size('ix_measurements_device') / 8192")).scalar_one())
    table = case_table(year)
    with ResultStore(postgres_url) as store:  # each node's shard, as tests/perf/fleet_shard.py writes it
        for node in range(year.nodes):
            run = dataclasses.replace(run_record(year.nights), host=host(node))
            store.start_run(run, shard=f"{node}/{year.nodes}")
            for device in range(node * year.gpus_per_node, (node + 1) * year.gpus_per_node):
                store.add_environment(run.run_id, environment(year, year.nights >= year.update_night, device))
            store.add_measurements(list(shard_records(year, table, year.nights, node)))
    with engine.connect() as conn:
        dirtied = _dirty_pages(conn, "ix_measurements_device")
        stored = int(conn.execute(text("SELECT count(*) FROM measurements m JOIN runs r ON r.id = m.run_id "
                                       "WHERE r.run_id = :run"), {"run": run_id(year.nights)}).scalar_one())
    engine.dispose()
    assert stored == year.devices * year.cases
    # in (device, case, run) order the night dirtied nearly every page of the index (190-214 of 195-219
    # here); in run order its own entries' few new pages and each device's last ones (48 of 216)
    assert 0 < dirtied <= leaves // 2, (dirtied, leaves)
