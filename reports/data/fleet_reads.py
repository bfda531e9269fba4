"""What `rooflab fleet` reads: the suite's runs, the nights judged picked from them, and only those
nights' results (db/fleet_query.py), as the frame reports/fleet/judge.py judges."""
from __future__ import annotations

from datetime import datetime

import pandas as pd

from rooflab.db.fleet_query import fleet_results, run_of, suite_runs, suites
from rooflab.db.handle import Db
from rooflab.db.nights import group_nights
from rooflab.reports.errors import ReportInputError


class NoSuiteRuns(ReportInputError):
    """The database holds no run of the suite (at or before the time asked): exit code 2."""


def run_start(url: Db, run_id: str) -> tuple[str, datetime] | None:
    """(suite, started_at) of run `run_id`, None when the database holds no such run."""
    return run_of(url, run_id)


def night_end(url: Db, suite: str, run_id: str, *, night_hours: float = 24.0) -> datetime:
    """The start of the newest run of the night that run `run_id` of `suite` belongs to (the suite's
    nights grouped from its newest run back, db/nights.py): judging at that time judges that night."""
    runs = suite_runs(url, suite)
    for night in group_nights(list(runs["started_at"]), hours=night_hours):
        if any(runs.at[i, "run_id"] == run_id for i in night.runs):
            return night.last_started_at
    raise NoSuiteRuns(f"run {run_id!r} is not a run of suite {suite!r}")


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
