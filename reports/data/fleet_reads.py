"""What `rooflab fleet` reads: the suite's runs, the nights judged picked from them, and only those
nights' results (db/fleet_query.py), as the frame reports/fleet/judge.py judges."""
from __future__ import annotations

from datetime import datetime

import pandas as pd

from rooflab.db.fleet_query import fleet_results, suite_runs, suites
from rooflab.db.handle import Db
from rooflab.db.nights import group_nights


class NoSuiteRuns(LookupError):
    """The database holds no run of the suite (at or before the time asked)."""


def load_fleet_results(url: Db, suite: str, *, nights: int, at: datetime | None = None,
                       night_hours: float = 24.0) -> pd.DataFrame:
    """The results of the newest `nights` nights of `suite` (the newest at or before `at`); NoSuiteRuns
    naming the suites the database holds when there is no such run."""
    runs = suite_runs(url, suite)
    grouped = group_nights(list(runs["started_at"]), at=at, hours=night_hours)[:nights]
    if not grouped:
        held = suites(url)
        when = f" at or before {at.isoformat()}" if at is not None else ""
        raise NoSuiteRuns(f"no run of suite {suite!r}{when} in the database"
                          + (f" (its suites: {', '.join(held)})" if held else " (it holds no run)"))
    positions = [i for night in grouped for i in night.runs]
    return fleet_results(url, [str(runs.at[i, "run_id"]) for i in positions])
