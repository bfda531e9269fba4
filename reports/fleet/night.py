"""The judgement of a database's night: what `rooflab fleet`, the report's fleet page and the nightly
read (reports/data/fleet_reads.py) and judge (judge.py; links.py for the link matrices)."""
from __future__ import annotations

from dataclasses import replace

from rooflab.db.handle import Db
from rooflab.reports.data.fleet_reads import load_fleet_results, night_end, run_start
from rooflab.reports.errors import ReportInputError
from rooflab.reports.fleet.judge import judge_fleet
from rooflab.reports.fleet.link_records import LinksNight
from rooflab.reports.fleet.links import JUDGED_NIGHTS, NoLinks, judge_links
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import FleetNight


def judge_night(db: Db, options: FleetOptions = FleetOptions(), *, run_id: str | None = None) -> FleetNight:
    """The judgement of the newest night of `options.suite` (at or before `options.at`; the night of
    run `run_id` when given). ReportInputError (exit code 2) for a suite without such a run, or a
    run that is not there or not of the suite."""
    options = _at_run(db, options, run_id)
    results = load_fleet_results(db, options.suite, nights=options.nights_needed, at=options.at,
                                 night_hours=options.night_hours)
    return judge_fleet(results, options)


def judge_links_night(db: Db, options: FleetOptions, *, run_id: str | None = None) -> LinksNight:
    """The judgement of the link matrices of the newest night of `options.suite` (as judge_night
    picks it), and of the two nights before; ReportInputError when its runs hold no pair."""
    options = _at_run(db, options, run_id)
    results = load_fleet_results(db, options.suite, nights=JUDGED_NIGHTS, at=options.at,
                                 night_hours=options.night_hours)
    try:
        return judge_links(results, options)
    except NoLinks as exc:
        raise ReportInputError(str(exc)) from None


def _at_run(db: Db, options: FleetOptions, run_id: str | None) -> FleetOptions:
    """`options` judging the night of run `run_id` (as they are when None)."""
    if run_id is not None:
        found = run_start(db, run_id)
        if found is None:
            raise ReportInputError(f"--run {run_id}: no such run in the database")
        suite, _ = found
        if suite != options.suite:
            raise ReportInputError(f"--run {run_id}: a run of suite {suite!r}, not {options.suite!r} "
                                   f"(give --suite {suite})")
        options = replace(options, at=night_end(db, suite, run_id, night_hours=options.night_hours))
    return options
