"""One nightly step for CI: run the suite, check the history for regressions, write the report.

This module sequences the steps; the regression check itself is reports.regressions.nightly_check's and the
report reports.pages.report's, so `runners.cluster.nightly` (like the CLI) is a place that calls `reports`.

`nightly()` returns a `NightlySummary`: counts by status for the whole run (all its shards), the
shards that are missing or unfinished, the regression verdicts of the series this run measured,
the fleet's judgement of the run's night (each device against its siblings: reports.fleet), where
the report is, the view the history was judged by (`by`: each case on each physical device, or on
each model: reports/regressions/options.py), and the exit code (1 when a verdict matches `fail_on`,
a device's fleet status `fleet_fail_on`, the run failed or cases of the spec have no result in the
run, 130 when interrupted, else 0). `text()` is the plain summary for a CI log; `to_dict()` is
written to OUT/summary.json for bots.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooflab.db.handle import Database, as_database
from rooflab.db.query import results, runs
from rooflab.db.store import ResultStore
from rooflab.reports.fleet.night import judge_night
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.status import FleetFailOn, FleetStatus, parse_fleet_fail_on
from rooflab.reports.pages.report import write_report
from rooflab.reports.regressions.nightly_check import check_history
from rooflab.reports.regressions.options import RegressionOptions
from rooflab.reports.regressions.verdicts import DRIFT, FLAG_KINDS, SHOWN_VERDICTS, FailOn, parse_fail_on
from rooflab.runners.errors import UserInputError
from rooflab.runners.orchestration import session
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.shards import parse_shard
from rooflab.suite.spec import apply_filters, expand, load_spec
from rooflab.vocab import ExitCode, RunStatus, SeriesBy

if TYPE_CHECKING:  # the spec's schema loads Pydantic: read when the night runs
    from rooflab.suite.spec_schema import Spec

SHOWN_PER_KIND = 10
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class ShardState:
    expected: int  # N of I/N (0: the run is not sharded)
    finished: tuple[str, ...]
    unfinished: tuple[str, ...]  # started, still "running" (killed, or still going)
    missing: tuple[str, ...]  # never started

    @property
    def complete(self) -> bool:
        return not self.unfinished and not self.missing


@dataclass(frozen=True)
class NightlySummary:
    run_id: str
    suite: str
    run_status: str | None  # running | complete | partial | interrupted | failed (None: no such run)
    db_url: str  # redacted
    counts: Mapping[str, int]  # results of the run by status (all shards)
    shards: ShardState
    verdicts: Mapping[str, tuple[Mapping[str, Any], ...]]  # regression / suspect / improvement -> rows
    series_checked: int
    insufficient_data: int
    fail_on: str
    report: str | None  # path of index.html
    cases_expected: int = 0  # cases of the spec (after filters) for the run's device kinds
    cases_missing: tuple[str, ...] = ()  # of those, the ones without any result in the run
    report_error: str | None = None
    invocation: Mapping[str, object] | None = None  # this process's run summary (None with --skip-run)
    notes: tuple[str, ...] = field(default_factory=tuple)
    fleet: Mapping[str, Any] | None = None  # FleetNight.brief() of the run's night (None: not judged)
    fleet_fail_on: str = FleetFailOn.DRAIN
    by: SeriesBy = SeriesBy.DEVICE  # what a series of the history check is: a case on a device, or on a model

    @property
    def fleet_alert(self) -> bool:
        """A device of the night at the `fleet_fail_on` status or worse."""
        if self.fleet is None:
            return False
        rule = FleetFailOn(self.fleet_fail_on)
        return any(rule.fails(FleetStatus(d["status"])) for d in self.fleet["flagged"])

    @property
    def alert(self) -> bool:
        return any(self.verdicts.get(kind) for kind in FailOn(self.fail_on).failing_kinds)

    @property
    def other_shards_pending(self) -> bool:
        """This process ran one shard and others have not finished: their cases are not missing yet."""
        return bool(self.invocation and self.invocation.get("shard")) and not self.shards.complete

    @property
    def coverage_failed(self) -> bool:
        """Cases of the spec without a result in the run (a run judged on part of its spec)."""
        return bool(self.cases_missing) and not self.other_shards_pending

    @property
    def exit_code(self) -> int:
        if self.invocation is not None and self.invocation.get("status") == RunStatus.INTERRUPTED:
            return ExitCode.INTERRUPTED
        if (self.alert or self.fleet_alert or self.run_status == RunStatus.FAILED or self.report_error is not None
                or self.coverage_failed):
            return ExitCode.FAILED
        return ExitCode.OK

    def to_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "suite": self.suite,
            "run_status": self.run_status,
            "db": self.db_url,
            "counts": dict(self.counts),
            "shards": {
                "expected": self.shards.expected,
                "finished": list(self.shards.finished),
                "unfinished": list(self.shards.unfinished),
                "missing": list(self.shards.missing),
                "complete": self.shards.complete,
            },
            **{f"{kind}s": [dict(v) for v in self.verdicts.get(kind, ())] for kind in FLAG_KINDS},
            "cases_expected": self.cases_expected,
            "cases_missing": list(self.cases_missing),
            "coverage_failed": self.coverage_failed,
            "by": str(self.by),
            "series_checked": self.series_checked,
            "insufficient_data": self.insufficient_data,
            "fail_on": self.fail_on,
            "alert": self.alert,
            "exit_code": self.exit_code,
            "report": self.report,
            "report_error": self.report_error,
            "invocation": dict(self.invocation) if self.invocation is not None else None,
            "notes": list(self.notes),
            "fleet": dict(self.fleet) if self.fleet is not None else None,
            "fleet_fail_on": self.fleet_fail_on,
            "fleet_alert": self.fleet_alert,
        }

    def text(self) -> str:
        """A few plain lines for a CI log (no colour, no table art)."""
        lines = [f"rooflab nightly: run {self.run_id} ({self.suite}) status {self.run_status or 'unknown'}"]
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        lines.append(f"results: {sum(self.counts.values())} ({counts})")
        if self.shards.expected:
            shard_line = f"shards: {len(self.shards.finished)}/{self.shards.expected} finished"
            if self.shards.unfinished:
                shard_line += f"; unfinished {', '.join(self.shards.unfinished)}"
            if self.shards.missing:
                shard_line += f"; missing {', '.join(self.shards.missing)}"
            lines.append(shard_line)
        if self.cases_expected:
            covered = self.cases_expected - len(self.cases_missing)
            line = f"coverage: {covered}/{self.cases_expected} cases of the spec have a result"
            if self.cases_missing:
                shown = ", ".join(self.cases_missing[:3])
                more = f" and {len(self.cases_missing) - 3} more" if len(self.cases_missing) > 3 else ""
                line += f"; missing {shown}{more}"
                if self.coverage_failed:
                    line += " (FAILS the night)"
                else:
                    line += " (other shards still running)"
            lines.append(line)
        n_reg, n_sus, n_imp = (len(self.verdicts.get(k, ())) for k in SHOWN_VERDICTS)
        lines.append(
            f"history (by {self.by}): {self.series_checked} series checked, {n_reg} regressions, {n_sus} suspects, "
            f"{n_imp} improvements, {self.insufficient_data} without enough history"
        )
        n_drift = len(self.verdicts.get(DRIFT, ()))
        if n_drift:
            lines[-1] += f", {n_drift} drifting"
        for kind, label in (("regression", "REGRESSION"), ("suspect", "suspect"), ("drift", "drift"),
                            ("improvement", "improved")):
            rows = self.verdicts.get(kind, ())
            for row in rows[:SHOWN_PER_KIND]:
                lines.append(
                    f"  {label:10s} {row['case_key']} on {row['device_name'] or row['device_fingerprint']}"
                    f"{_device(row)}: "
                    f"{_ms(row['baseline_ms'])} -> {_ms(row['latest_ms'])} ({_pct(row['rel_change'])}, "
                    f"z {row['z']:.1f})"
                )
            if len(rows) > SHOWN_PER_KIND:
                lines.append(f"  ... and {len(rows) - SHOWN_PER_KIND} more {kind}s (see {SUMMARY_FILE})")
        lines += _fleet_lines(self.fleet, self.fleet_fail_on)
        for note in self.notes:
            lines.append(f"note: {note}")
        if self.report:
            lines.append(f"report: {self.report}")
        if self.report_error:
            lines.append(f"report FAILED: {self.report_error}")
        lines.append(f"exit code {self.exit_code} (--fail-on {self.fail_on})")
        return "\n".join(lines)


def _fleet_lines(fleet: Mapping[str, Any] | None, fail_on: str) -> list[str]:
    """The summary's lines on the fleet: the counts, each flagged device, each fleet shift."""
    if fleet is None:
        return []
    counts = ", ".join(f"{n} {s}" for s, n in fleet["counts"].items())
    lines = [f"fleet: {fleet['devices']} devices against their siblings: {counts} (--fleet-fail-on {fail_on})"]
    for d in fleet["flagged"][:SHOWN_PER_KIND]:
        walls = ", ".join(f"{w} {v:+.1f} %" for w, v in d["walls"].items())
        lines.append(f"  {d['status']:10s} {d['host']} {d['device_key']}: {walls} (since {d['since']})")
    if len(fleet["flagged"]) > SHOWN_PER_KIND:
        lines.append(f"  ... and {len(fleet['flagged']) - SHOWN_PER_KIND} more flagged devices (see {SUMMARY_FILE})")
    for s in fleet["fleet_shifts"]:
        what = f"{s['wall']} wall" if s["case_key"] is None else s["case_key"]
        lines.append(f"  fleet shift: {s['device_name']} {what} {s['direction']} {s['shift']:+.1f} % "
                     f"({s['devices_moved']} of {s['devices']} devices moved)")
    return lines


def _device(row: Mapping[str, Any]) -> str:
    """The physical device of a series, " (host key)", as a line names it; "" for a model's aggregate."""
    key = row.get("device_key")
    return "" if key is None else f" ({row.get('host') or '?'} {key})"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.2f} us" if value < 1 else f"{value:.3f} ms"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f} %"


def check_out_dir(out_dir: Path) -> Path:
    if out_dir.exists() and not out_dir.is_dir():
        raise UserInputError(f"--out {out_dir}: exists and is not a directory")
    return out_dir


def shard_state(db: str | Database, run_id: str) -> ShardState:
    store = ResultStore(db)
    try:
        started = store.run_shards(run_id)
    finally:
        store.close()
    if not started:
        return ShardState(0, (), (), ())
    expected = max(s.shard_count for s in started)
    seen = {s.shard for s in started}
    finished = tuple(s.shard for s in started if s.status != RunStatus.RUNNING)
    unfinished = tuple(s.shard for s in started if s.status == RunStatus.RUNNING)
    missing = tuple(f"{i}/{expected}" for i in range(expected) if f"{i}/{expected}" not in seen)
    return ShardState(expected, finished, unfinished, missing)


def coverage(db_url: str | Database, run_id: str, spec: Spec, filters: Sequence[str]) -> tuple[int, tuple[str, ...]]:
    """(cases the spec expands to for the run's device kinds, those of them the run has no result for).

    Shards that never ran, or shards that disagreed on the partition, show up here.
    """
    frame = results(db_url, run_id=run_id)
    kinds = sorted(set(frame["device_kind"].dropna().astype(str))) or [None]
    expected: set[str] = set()
    for kind in kinds:
        expected |= {c.case_key for c in apply_filters(expand(spec, kind), list(filters))}
    missing = sorted(expected - set(frame["case_key"].astype(str)))
    return len(expected), tuple(missing)


def latest_run_of(db_url: str | Database, suite: str) -> str | None:
    frame = runs(db_url)
    frame = frame[frame["suite"] == suite]
    return None if frame.empty else str(frame.sort_values("run_order")["run_id"].iloc[-1])


INDUCTOR_CACHE_DIR = "inductor-cache"  # under --out: Inductor's and Triton's compiled code, kept between nights


@contextlib.contextmanager
def inductor_cache(out_dir: Path) -> Iterator[Path | None]:
    """Point TORCHINDUCTOR_CACHE_DIR at OUT/inductor-cache while the workers run (they inherit the
    environment), so that compiled cases reuse the graphs, kernels and autotuning of earlier nights
    and of the other modes of the same case tonight. A TORCHINDUCTOR_CACHE_DIR already set wins."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        yield None
        return
    path = out_dir / INDUCTOR_CACHE_DIR
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path.resolve())
    try:
        yield path
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)


@dataclass(frozen=True)
class NightlyOptions:
    """What one `rooflab nightly` is asked to do besides its spec and database (the CLI's flags)."""

    out_dir: Path
    fail_on: str = FailOn.REGRESSION
    fleet_fail_on: str = FleetFailOn.DRAIN  # a device of the run's night at this fleet status or worse fails it
    skip_run: bool = False  # judge and report an existing run (run.run_id, else the suite's latest)
    regression: RegressionOptions = RegressionOptions()
    # the run: its id, shard, filters and devices are also what is judged; quiet by default in CI
    run: RunOptions = RunOptions(quiet=True)


def nightly(spec_path: str, *, db: str | Database, options: NightlyOptions) -> NightlySummary:
    """Run (unless `skip_run`), judge the history, write the report and OUT/summary.json.

    `db` is a URL or the command's open db.handle.Database: the run, the history check and the
    report all read and write through that one handle."""
    o, reg = options, options.regression
    run_id, shard, out_dir = o.run.run_id, o.run.shard, o.out_dir
    try:
        parse_fail_on(o.fail_on)
        parse_fleet_fail_on(o.fleet_fail_on, "--fleet-fail-on")
    except ValueError as exc:
        raise UserInputError(str(exc)) from None
    if reg.window < 2:
        raise UserInputError(f"--window {reg.window}: at least 2 runs")
    if not reg.z_threshold > 0:
        raise UserInputError(f"--z-threshold {reg.z_threshold}: must be > 0")
    if not 0 <= reg.min_change < 1:
        raise UserInputError(f"--min-change {reg.min_change}: a fraction in [0, 1), e.g. 0.05 for 5 %")
    if shard is not None:
        parse_shard(shard)
    if o.skip_run and shard is not None:
        raise UserInputError("--shard runs a shard; with --skip-run there is nothing to run")
    check_out_dir(out_dir)
    spec = load_spec(spec_path)
    database, owned = as_database(db)
    try:
        return _nightly(spec_path, spec, database, o, run_id)
    finally:
        if owned:
            database.close()


def _nightly(spec_path: str, spec: Spec, database: Database, o: NightlyOptions, run_id: str | None) -> NightlySummary:
    out_dir = o.out_dir
    notes: list[str] = []
    invocation: Mapping[str, object] | None = None
    if o.skip_run:
        database.reader()  # a database that is not there is an input error, and stays not there
        if run_id is None:
            run_id = latest_run_of(database, spec.name)
            if run_id is None:
                raise UserInputError(f"--skip-run: the database {database.shown} has no run of {spec.name}")
    else:
        with inductor_cache(out_dir):
            summary = session.run_suite(spec_path, db=database, options=o.run)
        run_id = summary.run_id
        invocation = summary.to_dict()

    store = ResultStore(database)
    run_status = store.run_status(run_id)
    stored = store.get_run(run_id)
    if run_status is None or stored is None:
        raise UserInputError(f"--run-id {run_id}: no such run in {database.shown}")
    if stored.spec_hash != spec.sha256:
        notes.append(f"run {run_id} was made from another version of the spec; coverage is counted against {spec.path}")

    shards = shard_state(database, run_id)
    if not shards.complete:
        notes.append("the run is not complete yet: series of cases without a result tonight are not judged")
    expected, missing = coverage(database, run_id, spec, o.run.filters)
    checked = check_history(database, run_id, o.regression)
    fleet = judge_night(database, FleetOptions(suite=spec.name), run_id=run_id).brief()

    report: str | None = None
    report_error: str | None = None
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        report = str(write_report(database, out_dir))
    except Exception as exc:  # noqa: BLE001 - a broken report must not hide tonight's verdicts
        report_error = f"{type(exc).__name__}: {exc}"

    result = NightlySummary(
        run_id=run_id, suite=spec.name, run_status=run_status, db_url=database.shown, counts=checked.counts,
        shards=shards, verdicts=checked.verdicts, series_checked=checked.series_checked,
        insufficient_data=checked.insufficient_data, fail_on=o.fail_on, report=report, cases_expected=expected,
        cases_missing=missing, report_error=report_error, invocation=invocation, notes=tuple(notes),
        fleet=fleet, fleet_fail_on=o.fleet_fail_on, by=o.regression.by,
    )
    tmp = out_dir / (SUMMARY_FILE + ".tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(out_dir / SUMMARY_FILE)
    return result
