"""CLI: `regressions` and `report`, the history check and the HTML report (thin wrappers over reports/)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from rooflab.db.urls import redact
from rooflab.reports.allocator import keep_mmap_threshold
from rooflab.reports.data.side_reads import load_collectives, load_counters, load_crosschecks, load_layer_profiles
from rooflab.reports.pages.history_judge import PendingVerdicts
from rooflab.reports.pages.report import render_report
from rooflab.reports.pages.report_inputs import load_report_inputs
from rooflab.reports.regressions.database_check import load_verdicts
from rooflab.reports.regressions.gate import SeriesVerdict
from rooflab.reports.regressions.options import RegressionOptions
from rooflab.reports.regressions.verdicts import DRIFT, FailOn, Verdict, parse_fail_on, should_fail
from rooflab.runners.cli.common import (
    ByOption,
    DbOption,
    JsonOption,
    db_url,
    fmt,
    output_dir,
    pct,
    require_database,
    series_device,
)
from rooflab.runners.cli.epilogue import conclude, console, fail, guarded, respond
from rooflab.runners.cli.reading import tools_of_devices
from rooflab.vocab import ExitCode, SeriesBy, Tool

REGRESSION_DEFAULTS = RegressionOptions()  # the flags' defaults


def regressions_cmd(
    db: str | None = DbOption,
    as_json: bool = JsonOption,
    fail_on: str = typer.Option(str(FailOn.REGRESSION), "--fail-on",
                                help="Exit 1 on: regression; drift (or regression); "
                                     "suspect (or regression or drift); never."),
    window: int = typer.Option(REGRESSION_DEFAULTS.window, "--window", help="Baseline: the last N good results."),
    threshold: float = typer.Option(REGRESSION_DEFAULTS.z_threshold, "--threshold",
                                    help="Robust z-score above which a result is flagged."),
    min_change: float = typer.Option(REGRESSION_DEFAULTS.min_change, "--min-change",
                                     help="Minimum relative change to flag (0.05 = 5 %)."),
    show_all: bool = typer.Option(False, "--all", help="List every series, not only flagged ones."),
    by: SeriesBy = ByOption,
) -> None:
    """Newest two results of every series (each case on each physical device, or --by model) against
    a robust baseline, and change points and drift over its history; exit 1 when --fail-on matches."""
    try:
        parse_fail_on(fail_on)
    except ValueError as exc:
        fail(escape(str(exc)))
    if window < 1:
        fail("--window: must be at least 1")
    if not threshold > 0:
        fail("--threshold: must be > 0")
    if not 0 <= min_change < 10:
        fail("--min-change: must be a fraction >= 0 (0.05 = 5 %)")
    url = db_url(db)
    require_database(url)
    options = RegressionOptions(window=window, z_threshold=threshold, min_change=min_change, by=by)

    def check() -> _Checked:
        verdicts = load_verdicts(url, options)
        return _Checked(verdicts, tools_of_devices(url) if verdicts else {}, fail_on, show_all, by)

    respond(check, as_json=as_json, to_json=_Checked.to_json, show=_Checked.show,
            exit_code=lambda checked: ExitCode.FAILED if checked.failing else ExitCode.OK,
            failing_note=lambda checked: f"failing: results match --fail-on {fail_on}")


@dataclass(frozen=True)
class _Checked:
    """What `rooflab regressions` found: every series' verdict, the tools of imported devices, the options."""
    verdicts: list[SeriesVerdict]
    tools: dict[str, str]
    fail_on: str
    show_all: bool
    by: SeriesBy = SeriesBy.DEVICE

    @property
    def failing(self) -> bool:
        return should_fail(self.verdicts, self.fail_on)

    @property
    def counts(self) -> dict[str, int]:
        counts = {str(s): sum(v.status == s for v in self.verdicts) for s in Verdict}
        counts[DRIFT] = sum(v.drift is not None for v in self.verdicts)
        return counts

    @property
    def shown(self) -> list[SeriesVerdict]:
        order = tuple(Verdict)  # the most urgent first
        return sorted((v for v in self.verdicts if self.show_all or v.flagged),
                      key=lambda v: (order.index(v.status), v.case_key))

    def to_json(self) -> dict[str, object]:
        return {"by": str(self.by), "counts": self.counts, "fail_on": self.fail_on, "failed": self.failing,
                "series": [{**v.as_dict(), "tool": self.tools.get(v.device_fingerprint, str(Tool.ROOFLAB))}
                           for v in self.verdicts if self.show_all or v.flagged]}

    def show(self) -> None:
        counts = self.counts
        each = ("a case on one device each" if self.by == SeriesBy.DEVICE
                else "a case on one model each: its devices' median")
        t = Table(title=f"{len(self.verdicts)} series ({each}): " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        for col in ("status", "case", "device", "newest ms", "baseline ms", "change", "z", "first bad run", "history",
                    "note"):
            t.add_column(col, overflow="fold")
        for v in self.shown:
            d = v.as_dict()
            first_bad = f"{d['first_bad_run']} ({d['first_bad_commit'] or 'no commit'})" if d["first_bad_run"] else ""
            history = [f"{c.direction} {100 * c.rel_change:+.1f} % at {c.run_id}" for c in v.change_points]
            if v.drift is not None:
                history.append(f"drift {100 * v.drift.rel_change:+.1f} % over {v.drift.n_points} runs")
            t.add_row(v.status, escape(v.case_key),
                      escape(series_device(v.device_name, v.device_fingerprint, v.device_key, v.host, self.tools)),
                      fmt(d["latest_ms"]), fmt(d["baseline_ms"]),
                      pct(d["rel_change"]), fmt(d["z"], 3), escape(first_bad), escape("; ".join(history)),
                      escape(v.note))
        console.print(t)
        if not self.verdicts:
            console.print("no results yet: nothing to check")


def report_cmd(
    out: Path = typer.Option(..., "--out", help="Folder for the static HTML site (index.html)."),
    db: str | None = DbOption,
    run: list[str] = typer.Option([], "--run",
                                  help="Device pages show this run (repeatable); default: each device's newest run."),
    since: str | None = typer.Option(None, "--since",
                                        help="Device pages show every run started on or after this date (YYYY-MM-DD)."),
) -> None:
    """Write the static HTML report (rooflines, diagnosis, comparison, regressions)."""
    if run and since:
        fail("give either --run or --since, not both")
    url = db_url(db)
    require_database(url)
    folder = output_dir(out)
    keep_mmap_threshold()
    # judged, and the history pages drawn and written, side by side with the reading and drawing below
    pending = PendingVerdicts(url, out_dir=folder, runs=run or None, since=since)
    try:
        inputs = guarded(lambda: load_report_inputs(url, runs=run or None, since=since, with_history=False))
        crosschecks = guarded(lambda: load_crosschecks(url))
        layer = guarded(lambda: load_layer_profiles(url))
        counters = guarded(lambda: load_counters(url))
        df = inputs.results
        groups = guarded(lambda: load_collectives(url, sorted(df["run_id"].astype(str).unique()) if not df.empty
                                                 else []))
        index = guarded(lambda: render_report(inputs.results, folder, source=redact(url), verdicts=pending.result,
                                             runs=run or None, since=since, counts=inputs.counts,
                                             crosschecks=crosschecks, layer_profiles=layer, counters=counters,
                                             collectives=groups, history=pending.pages, evidence=inputs.evidence))
    finally:
        pending.cancel()  # a report that failed before the regressions page leaves no process behind
    conclude(index, show=lambda written: console.print(f"report: {escape(str(written))}", highlight=False,
                                                       soft_wrap=True))


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("regressions")(regressions_cmd)
    app.command("report")(report_cmd)
