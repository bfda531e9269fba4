"""One nightly step for CI: run the suite, check the history for regressions, write the report.

`nightly()` returns a `NightlySummary`: counts by status for the whole run (all its shards), the
shards that are missing or unfinished, the regression verdicts of the series this run measured,
where the report is, and the exit code (1 when a verdict matches `fail_on`, the run failed or
cases of the spec have no result in the run, 130 when interrupted, else 0). `text()` is the plain summary for a CI log; `to_dict()` is written
to OUT/summary.json for bots.
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from rooflab.db.status import ResultStatus, RunStatus
from rooflab.reports.verdicts import DRIFT, FLAG_KINDS, SHOWN_VERDICTS, FailOn, Verdict, parse_fail_on
from rooflab.runners.cli.common import UserInputError

EXIT_OK = 0
EXIT_ALERT = 1
EXIT_INTERRUPTED = 130
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
    invocation: Mapping[str, Any] | None = None  # this process's run summary (None with --skip-run)
    notes: tuple[str, ...] = field(default_factory=tuple)

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
            return EXIT_INTERRUPTED
        if self.alert or self.run_status == RunStatus.FAILED or self.report_error is not None or self.coverage_failed:
            return EXIT_ALERT
        return EXIT_OK

    def to_dict(self) -> dict[str, Any]:
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
            "series_checked": self.series_checked,
            "insufficient_data": self.insufficient_data,
            "fail_on": self.fail_on,
            "alert": self.alert,
            "exit_code": self.exit_code,
            "report": self.report,
            "report_error": self.report_error,
            "invocation": dict(self.invocation) if self.invocation is not None else None,
            "notes": list(self.notes),
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
            f"history: {self.series_checked} series checked, {n_reg} regressions, {n_sus} suspects, "
            f"{n_imp} improvements, {self.insufficient_data} without enough history"
        )
        n_drift = len(self.verdicts.get(DRIFT, ()))
        if n_drift:
            lines[-1] += f", {n_drift} drifting"
        labels = {Verdict.REGRESSION: "REGRESSION", Verdict.SUSPECT: "suspect", DRIFT: "drift", Verdict.IMPROVEMENT: "improved"}
        for kind, label in labels.items():
            rows = self.verdicts.get(kind, ())
            for row in rows[:SHOWN_PER_KIND]:
                lines.append(
                    f"  {label:10s} {row['case_key']} on {row['device_name'] or row['device_fingerprint']}: "
                    f"{_ms(row['baseline_ms'])} -> {_ms(row['latest_ms'])} ({_pct(row['rel_change'])}, z {row['z']:.1f})"
                )
            if len(rows) > SHOWN_PER_KIND:
                lines.append(f"  ... and {len(rows) - SHOWN_PER_KIND} more {kind}s (see {SUMMARY_FILE})")
        for note in self.notes:
            lines.append(f"note: {note}")
        if self.report:
            lines.append(f"report: {self.report}")
        if self.report_error:
            lines.append(f"report FAILED: {self.report_error}")
        lines.append(f"exit code {self.exit_code} (--fail-on {self.fail_on})")
        return "\n".join(lines)


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


def shard_state(db_url: str, run_id: str) -> ShardState:
    from rooflab.db.store import ResultStore

    store = ResultStore(db_url)
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


def series_of_run(history: Any, run_id: str) -> Any:
    """The rows of every series (case_key x device fingerprint) the run measured, up to that run."""
    this_run = history[history["run_id"] == run_id]
    if this_run.empty:
        return history.iloc[0:0]
    order = int(this_run["run_order"].iloc[0])
    keys = set(zip(this_run["case_key"], this_run["device_fingerprint"]))
    upto = history[history["run_order"] <= order]
    mask = [(k, f) in keys for k, f in zip(upto["case_key"], upto["device_fingerprint"])]
    return upto[mask]


def check_history(db_url: str, run_id: str, *, window: int, z_threshold: float, min_change: float
                  ) -> tuple[dict[str, tuple[dict[str, Any], ...]], int, int, dict[str, int]]:
    """(verdict rows by status, series checked, series without enough history, counts by status)."""
    from rooflab.db.query import results, run_ids
    from rooflab.reports.regressions import DETECT_COLUMNS, detect, detect_in_database

    this_run = results(db_url, run_id=run_id, columns=["case_key", "device_fingerprint", "status"])
    counts = {str(status): int((this_run["status"] == status).sum()) for status in ResultStatus}
    kw = {"window": window, "z_threshold": z_threshold, "min_change": min_change}
    if not this_run.empty and run_ids(db_url)[-1] == run_id:
        # the newest run: its series up to it are their whole histories, judged from the newest runs
        keys = set(zip(this_run["case_key"].astype(str), this_run["device_fingerprint"].astype(str)))
        verdicts = [v for v in detect_in_database(db_url, **kw) if (v.case_key, v.device_fingerprint) in keys]
    else:
        verdicts = detect(series_of_run(results(db_url, columns=DETECT_COLUMNS), run_id), **kw)
    # only series whose newest point is this run are judged on tonight's figures
    judged = [v for v in verdicts if v.latest is not None and v.latest.run_id == run_id]
    by_kind: dict[str, list[dict[str, Any]]] = {str(kind): [] for kind in FLAG_KINDS}
    for verdict in judged:
        if verdict.status in by_kind:
            by_kind[verdict.status].append(verdict.as_dict())
        if verdict.drift is not None:
            by_kind[DRIFT].append(verdict.as_dict())
    for rows in by_kind.values():
        rows.sort(key=lambda r: (-abs(r["rel_change"] or 0.0), r["case_key"], r["device_fingerprint"]))
    insufficient = sum(1 for v in verdicts if v.status == Verdict.INSUFFICIENT_DATA)
    return {k: tuple(v) for k, v in by_kind.items()}, len(verdicts), insufficient, counts


def coverage(db_url: str, run_id: str, spec: Any, filters: Sequence[str]) -> tuple[int, tuple[str, ...]]:
    """(cases the spec expands to for the run's device kinds, those of them the run has no result for).

    Shards that never ran, or shards that disagreed on the partition, show up here.
    """
    from rooflab.db.query import results
    from rooflab.suite.spec import apply_filters, expand

    frame = results(db_url, run_id=run_id)
    kinds = sorted(set(frame["device_kind"].dropna().astype(str))) or [None]
    expected: set[str] = set()
    for kind in kinds:
        expected |= {c.case_key for c in apply_filters(expand(spec, kind), list(filters))}
    missing = sorted(expected - set(frame["case_key"].astype(str)))
    return len(expected), tuple(missing)


def latest_run_of(db_url: str, suite: str) -> str | None:
    from rooflab.db.query import runs

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


def nightly(
    spec_path: str,
    *,
    db_url: str,
    out_dir: Path,
    fail_on: str = "regression",
    run_id: str | None = None,
    shard: str | None = None,
    filters: Sequence[str] = (),
    device: str = "auto",
    devices: str | None = None,
    skip_run: bool = False,
    quiet: bool = True,
    window: int = 30,
    z_threshold: float = 4.0,
    min_change: float = 0.05,
    run_options: Mapping[str, Any] | None = None,
) -> NightlySummary:
    """Run (unless `skip_run`), judge the history, write the report and OUT/summary.json."""
    from rooflab.db.urls import redact
    from rooflab.runners.shards import parse_shard
    from rooflab.suite.spec import load_spec

    try:
        parse_fail_on(fail_on)
    except ValueError as exc:
        raise UserInputError(str(exc)) from None
    if window < 2:
        raise UserInputError(f"--window {window}: at least 2 runs")
    if not z_threshold > 0:
        raise UserInputError(f"--z-threshold {z_threshold}: must be > 0")
    if not 0 <= min_change < 1:
        raise UserInputError(f"--min-change {min_change}: a fraction in [0, 1), e.g. 0.05 for 5 %")
    if shard is not None:
        parse_shard(shard)
    if skip_run and shard is not None:
        raise UserInputError("--shard runs a shard; with --skip-run there is nothing to run")
    check_out_dir(out_dir)
    spec = load_spec(spec_path)
    notes: list[str] = []

    invocation: dict[str, Any] | None = None
    if skip_run:
        from rooflab.db.schema import require_current

        require_current(db_url)  # a database that is not there is an input error, and stays not there
        if run_id is None:
            run_id = latest_run_of(db_url, spec.name)
            if run_id is None:
                raise UserInputError(f"--skip-run: the database {redact(db_url)} has no run of {spec.name}")
    else:
        from rooflab.runners.session import run_suite

        with inductor_cache(out_dir):
            summary = run_suite(
                spec_path, db_url=db_url, filters=tuple(filters), device=device, devices=devices, shard=shard,
                run_id=run_id, quiet=quiet, **dict(run_options or {}),
            )
        run_id = summary.run_id
        invocation = summary.to_dict()

    from rooflab.db.store import ResultStore

    store = ResultStore(db_url)
    try:
        run_status = store.run_status(run_id)
        stored = store.get_run(run_id)
    finally:
        store.close()
    if run_status is None or stored is None:
        raise UserInputError(f"--run-id {run_id}: no such run in {redact(db_url)}")
    if stored.spec_hash != spec.sha256:
        notes.append(f"run {run_id} was made from another version of the spec; coverage is counted against {spec.path}")

    shards = shard_state(db_url, run_id)
    if not shards.complete:
        notes.append("the run is not complete yet: series of cases without a result tonight are not judged")
    expected, missing = coverage(db_url, run_id, spec, filters)
    verdicts, checked, insufficient, counts = check_history(
        db_url, run_id, window=window, z_threshold=z_threshold, min_change=min_change
    )

    report: str | None = None
    report_error: str | None = None
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        from rooflab.reports.html import write_report

        report = str(write_report(db_url, out_dir))
    except Exception as exc:  # noqa: BLE001 - a broken report must not hide tonight's verdicts
        report_error = f"{type(exc).__name__}: {exc}"

    result = NightlySummary(
        run_id=run_id, suite=spec.name, run_status=run_status, db_url=redact(db_url), counts=counts,
        shards=shards, verdicts=verdicts, series_checked=checked, insufficient_data=insufficient,
        fail_on=fail_on, report=report, cases_expected=expected, cases_missing=missing,
        report_error=report_error, invocation=invocation, notes=tuple(notes),
    )
    tmp = out_dir / (SUMMARY_FILE + ".tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(out_dir / SUMMARY_FILE)
    return result
