"""CLI: `history`: a series' runs, or a sparkline per series (a thin wrapper over reports.regressions.history_view)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from rooflab.reports.regressions.history_view import load_series_views
from rooflab.runners.cli.common import (
    ByOption,
    DbOption,
    JsonOption,
    db_url,
    require_database,
    series_device,
)
from rooflab.runners.cli.epilogue import console, fail, respond
from rooflab.runners.cli.reading import tools_of_devices
from rooflab.vocab import SeriesBy

if TYPE_CHECKING:  # the reports' modules load pandas: only when the command runs
    from rooflab.reports.regressions.history_view import SeriesView

SPARK = "▁▂▃▄▅▆▇█"
SPARK_RUNS = 60  # runs a sparkline shows without --last
TABLE_RUNS = 30  # runs the table of one case shows without --last


def sparkline(values: list[float]) -> str:
    """One block character per value, from the lowest (▁) to the highest (█) of them."""
    finite = [v for v in values if v == v]
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    span = hi - lo
    return "".join(" " if v != v else SPARK[0 if span == 0 else min(len(SPARK) - 1, int((v - lo) / span * len(SPARK)))]
                   for v in values)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.{digits}g}" if isinstance(value, float) else escape(str(value))


def _pct(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:+.1f} %"


def _verdict_line(view: Any) -> str:
    d = view.verdict.as_dict()
    parts = [f"{view.kind}"]
    if d["baseline_ms"] is not None:
        parts.append(f"baseline {_fmt(d['baseline_ms'])} ms (spread {_fmt(d['baseline_spread_ms'], 3)}), "
                     f"newest {_pct(d['rel_change'])}")
    if d["first_bad_run"]:
        parts.append(f"first bad run {d['first_bad_run']} ({d['first_bad_commit'] or 'no commit'})")
    for c in view.verdict.change_points:
        parts.append(f"change point {c.direction} {_pct(c.rel_change)} at {c.run_id}")
    if view.verdict.drift is not None:
        parts.append(f"drift {_pct(view.verdict.drift.rel_change)} over {view.verdict.drift.n_points} runs")
    if view.verdict.note:
        parts.append(view.verdict.note)
    return "; ".join(parts)


def _print_runs(view: Any, tools: dict[str, str]) -> None:
    v = view.verdict
    name = series_device(v.device_name, v.device_fingerprint, v.device_key, v.host, tools)
    title = f"{escape(v.case_key)} on {escape(name)} (newest fingerprint {escape(v.device_fingerprint[:12])})"
    console.print(f"{title}\n{escape(_verdict_line(view))}", highlight=False, soft_wrap=True)
    flagged = {f.run_id for f in (v.previous, v.latest) if f is not None and f.flagged}
    changes = {c.run_id: c for c in v.change_points}
    t = Table(show_edge=False)
    for col in ("run", "started (UTC)", "commit", "median ms", "p10 ms", "p90 ms", "note"):
        t.add_column(col, overflow="fold")
    for _, r in view.runs.iterrows():
        notes = [n for n in (
            "flagged" if r["run_id"] in flagged else "",
            "first bad run" if v.first_bad is not None and v.first_bad.run_id == r["run_id"] else "",
            f"change point {_pct(changes[r['run_id']].rel_change)}" if r["run_id"] in changes else "",
            f"kept out of baseline: {r['excluded']}" if r["excluded"] else "",
            f"segment starts: {r['segment_start']}" if r["segment_start"] else "") if n]
        started = "" if r["started_at"] is None or r["started_at"] != r["started_at"] else str(r["started_at"])[:16]
        t.add_row(escape(str(r["run_id"])), escape(started.replace("T", " ")), escape(str(r["git_commit"] or "")[:12]),
                  _fmt(r["median_ms"]), _fmt(r["p10_ms"]), _fmt(r["p90_ms"]), escape("; ".join(notes)))
    console.print(t)


def _print_sparklines(found: list, tools: dict[str, str]) -> None:
    t = Table(title=f"{len(found)} series")
    for col in ("case", "device", "trend (oldest to newest)", "runs", "newest ms", "change", "verdict"):
        t.add_column(col, overflow="fold")
    for view in found:
        d = view.verdict.as_dict()
        medians = view.runs["median_ms"].astype(float).tolist()
        v = view.verdict
        where = series_device(v.device_name, v.device_fingerprint, v.device_key, v.host, tools)
        t.add_row(escape(view.verdict.case_key), escape(where), sparkline(medians), str(d["n_points"]),
                  _fmt(medians[-1] if medians else None),
                  _pct(d["rel_change"]), escape(view.kind))
    console.print(t)


def history_cmd(
    case_key: str | None = typer.Argument(None, metavar="[CASE_KEY]", help="One case's series: every run."),
    filter_: list[str] = typer.Option([], "--filter", "-f",
                                      help="Series of the cases with KEY=VALUE (op, family, backend, dtype, cache, "
                                           "timing_mode, a parameter, or verdict: regression, suspect, drift, ...); "
                                           "repeatable: a repeated key means OR, different keys AND."),
    device: str | None = typer.Option(None, "--device",
                                      help="Only this device: its key (a GPU's UUID, or a prefix of it) or host; "
                                           "or a model (name, part of it, or fingerprint)."),
    by: SeriesBy = ByOption,
    db: str | None = DbOption,
    as_json: bool = JsonOption,
    last: int | None = typer.Option(None, "--last", help=f"Only the newest N runs of each series [default: "
                                                        f"{TABLE_RUNS} for one case, {SPARK_RUNS} per sparkline]."),
) -> None:
    """The history of a case (every run, with the regression check's verdict), or a sparkline per
    series of the cases matching --filter. Exit 2 with the nearest case keys when nothing matches."""
    if (case_key is None) == (not filter_):
        fail("give a CASE_KEY or --filter KEY=VALUE (one or the other), e.g. rooflab history -f op=copy")
    if last is not None and last < 1:
        fail("--last: must be at least 1")
    url = db_url(db)
    require_database(url)
    shown = last if last is not None else (TABLE_RUNS if case_key is not None else SPARK_RUNS)

    def show(found: list[SeriesView]) -> None:
        tools = tools_of_devices(url)
        if case_key is not None:
            for view in found:
                _print_runs(view, tools)
        else:
            _print_sparklines(found, tools)

    respond(lambda: load_series_views(url, case_key=case_key, filters=filter_, device=device,
                                      last=None if as_json and last is None else shown, by=by),
            as_json=as_json, to_json=lambda found: {"by": str(by), "series": [v.as_dict() for v in found]},
            show=show)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("history")(history_cmd)
