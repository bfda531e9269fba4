"""The judgement of a database's night: what `rooflab fleet`, the report's fleet page and the nightly
read (reports/data/fleet_reads.py) and judge (judge.py)."""
from __future__ import annotations

from dataclasses import replace

from rooflab.db.handle import Db
from rooflab.reports.data.fleet_reads import load_fleet_results, night_end, run_start
from rooflab.reports.errors import ReportInputError
from rooflab.reports.fleet.judge import judge_fleet
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import FleetNight


def judge_night(db: Db, options: FleetOptions = FleetOptions(), *, run_id: str | None = None) -> FleetNight:
    """The judgement of the newest night of `options.suite` (at or before `options.at`; the night of
    run `run_id` when given). ReportInputError (exit code 2) for a suite without such a run, or a
    run that is not there or not of the suite."""
    if run_id is not None:
        found = run_start(db, run_id)
        if found is None:
            raise ReportInputError(f"--run {run_id}: no such run in the database")
        suite, _ = found
        if suite != options.suite:
            raise ReportInputError(f"--run {run_id}: a run of suite {suite!r}, not {options.suite!r} "
                                   f"(give --suite {suite})")
        options = replace(options, at=night_end(db, suite, run_id, night_hours=options.night_hours))
    results = load_fleet_results(db, options.suite, nights=options.nights_needed, at=options.at,
                                 night_hours=options.night_hours)
    return judge_fleet(results, options)
