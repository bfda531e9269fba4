"""The ways into a fleet's results (device, case, run order) and the index each should take, checked
with PostgreSQL's EXPLAIN (tests/perf/bench_fleet.py on a year; tests/db/test_access_paths.py on a
small fleet, sequential scans switched off so that a few rows still show the index the query fits).

    for path in explain(url, params):  # the plan's indexes and its time
        print(path.name, path.indexes, path.ms)
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import create_engine, text

from rooflab.db.urls import normalize_url


@dataclass(frozen=True)
class AccessPath:
    name: str
    sql: str  # with :device, :case, :environment, :run, :nights parameters
    index: str  # the index the plan should use


ACCESS_PATHS = (
    AccessPath("one series in run order (device, case)",
               "SELECT run_id, median_ms FROM measurements WHERE device_key = :device AND case_id = :case "
               "ORDER BY run_id", "ix_measurements_device"),
    AccessPath("a device's results since a run (device, run order)",
               "SELECT case_id, run_id, median_ms FROM measurements WHERE device_key = :device AND run_id >= :run",
               "ix_measurements_device"),
    AccessPath("a case on one model in run order (case)",
               "SELECT run_id, device_key, median_ms FROM measurements WHERE case_id = :case "
               "AND environment_id = :environment ORDER BY run_id", "ix_measurements_history"),
    AccessPath("one night (run)", "SELECT case_id, device_key, median_ms FROM measurements WHERE run_id = :run",
               "uq_measurements_run_case_device"),
    AccessPath("the newest nights (run order)",
               "SELECT m.case_id, m.device_key, m.median_ms FROM measurements m WHERE m.run_id IN "
               "(SELECT id FROM runs ORDER BY started_at DESC LIMIT :nights)", "uq_measurements_run_case_device"),
)


@dataclass(frozen=True)
class Plan:
    name: str
    expected: str
    indexes: tuple[str, ...]  # every index the plan reads
    ms: float  # its execution time (EXPLAIN ANALYZE)
    rows: int

    @property
    def uses_expected(self) -> bool:
        return self.expected in self.indexes


def _indexes(node: dict[str, Any]) -> Iterator[str]:
    if "Index Name" in node:
        yield str(node["Index Name"])
    for child in node.get("Plans", ()):
        yield from _indexes(child)


def sample_params(url: str, nights: int) -> dict[str, object]:
    """A device, a case, an environment and the run `nights` back from the newest, as the database has them."""
    engine = create_engine(normalize_url(url))
    with engine.connect() as conn:
        device, case, environment = conn.execute(text(
            "SELECT device_key, case_id, environment_id FROM measurements ORDER BY id DESC LIMIT 1")).one()
        run = conn.execute(text("SELECT id FROM runs ORDER BY started_at DESC LIMIT 1 OFFSET :n"),
                           {"n": nights - 1}).scalar()
    engine.dispose()
    return {"device": device, "case": case, "environment": environment, "run": run, "nights": nights}


def explain(url: str, params: dict[str, object], *, no_seqscan: bool = False) -> list[Plan]:
    """Each access path's plan, run (EXPLAIN ANALYZE); `no_seqscan`: the planner told to avoid
    sequential scans (on a small table it reads everything that way, whatever the indexes)."""
    engine = create_engine(normalize_url(url))
    out = []
    with engine.connect() as conn:
        if no_seqscan:
            conn.execute(text("SET enable_seqscan = off"))
        for path in ACCESS_PATHS:
            (plan,) = conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {path.sql}"), params).scalar_one()
            plan = plan if isinstance(plan, dict) else json.loads(plan)
            top = plan["Plan"]
            out.append(Plan(path.name, path.index, tuple(dict.fromkeys(_indexes(top))),
                            float(plan["Execution Time"]), int(top["Actual Rows"])))
    engine.dispose()
    return out
