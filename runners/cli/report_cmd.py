"""CLI: `roofline`, `predict`, `compare`, `regressions`, `report` (thin wrappers over reports/*)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from rooflab.reports.options import RegressionOptions
from rooflab.reports.verdicts import FailOn
from rooflab.runners.cli.common import (
    DbOption,
    JsonOption,
    console,
    db_url,
    err_console,
    fail,
    output_dir,
    print_json,
    require_database,
)
from rooflab.vocab import CeilingKind

if TYPE_CHECKING:  # pandas loads only in the commands that read results
    import pandas as pd

T = TypeVar("T")

REGRESSION_DEFAULTS = RegressionOptions()  # the flags' defaults


def _guard(action: Callable[[], T]) -> T:
    """Run `action`; invalid input (ReportInputError, DatabaseInputError) becomes exit code 2."""
    from rooflab.db.errors import DatabaseInputError
    from rooflab.reports.errors import ReportInputError

    try:
        return action()
    except (ReportInputError, DatabaseInputError) as exc:
        fail(escape(str(exc)))


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return escape(str(value))


def _pct(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f} %"


def _load(db: str | None, columns: Sequence[str] | None = None) -> pd.DataFrame:
    from rooflab.reports.load import load_results

    return _guard(lambda: load_results(db_url(db), columns=columns))


def _out_dir(out: Path | None) -> Path | None:
    return None if out is None else output_dir(out)


def roofline_cmd(
    device: str = typer.Option(..., "--device", help="Device name (or part of it) or fingerprint prefix."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
    out: Path | None = typer.Option(None, "--out", help="Write the roofline and bandwidth charts (SVG) here."),
    run: list[str] = typer.Option([], "--run", help="Show this run (repeatable); default: the device's newest run."),
    since: str | None = typer.Option(None, "--since",
                                        help="Show every run started on or after this date (YYYY-MM-DD)."),
) -> None:
    """Measured ceilings of one device, each with its case, run and ratio to the datasheet."""
    from rooflab.reports.html import slug
    from rooflab.reports.load import ROOFLINE_COLUMNS, load_device_results
    from rooflab.reports.roofline import device_roofline
    from rooflab.reports.runsel import choose_runs, counts_of

    url = db_url(db)
    require_database(url)
    name, rows = _guard(lambda: load_device_results(url, device, ROOFLINE_COLUMNS))
    plan = _guard(lambda: choose_runs(counts_of(rows), runs=run or None, since=since)).get(name)
    if plan is None:
        fail(f"--run/--since: no results of {escape(name)} in the chosen runs")
    roofline = device_roofline(name, rows, plan)
    dc, llc = roofline.ceilings, roofline.on_cpu
    figures: list[str] = []
    folder = _out_dir(out)
    if folder is not None:
        for kind, svg in (("roofline", roofline.roofline_svg()), ("bandwidth", roofline.bandwidth_svg())):
            path = folder / f"{kind}-{slug(name)}.svg"
            path.write_text(svg, encoding="utf-8")
            figures.append(str(path))
    if as_json:
        print_json({**dc.as_dict(), "shown_runs": list(plan.shown), "roof_runs": list(plan.roof_runs),
                    "figures": figures})
        return
    title = f"Ceilings of {escape(name)}\n(datasheet: {escape(dc.spec.key) if dc.spec else 'none'})"
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("ceiling", no_wrap=True)
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("datasheet", justify="right", no_wrap=True)
    table.add_column("ratio", justify="right", no_wrap=True)
    table.add_column("measured as", no_wrap=True)
    sources = []
    for i, c in enumerate(dc.ceilings, start=1):
        label = "LLC" if llc and c.kind == CeilingKind.L2 else c.label
        table.add_row(str(i), escape(label), f"{_fmt(c.value)} {c.unit}" + (" *" if c.raised else ""),
                      _fmt(c.datasheet), _pct(c.ratio), escape(c.method))
        line = f"[{i}] {c.case_key}  (run {c.run_id})"
        if c.raised:
            line += f"\n    * raised: this result beat the probe's {_fmt(c.probe_value)} {c.unit} ({c.probe_case_key})"
        sources.append(line)
    console.print(table)
    shown = ", ".join(plan.shown)
    how = "" if plan.chosen_by != "newest" else " (the newest; --run or --since to choose)"
    console.print(f"runs shown: {escape(shown)}{how}", highlight=False, overflow="fold")
    if plan.roofs_elsewhere:
        console.print(f"roofs from run {escape(', '.join(plan.roof_runs))} (the newest with probe results)",
                      highlight=False, overflow="fold")
    if sources:
        console.print("where each ceiling comes from:", highlight=False)
        for line in sources:
            console.print(escape(line), highlight=False, overflow="fold")
    if not dc.ceilings:
        console.print("no trustworthy probe results for this device yet (run suite/specs/roofline.yaml)")
    for figure in figures:
        console.print(f"wrote {escape(figure)}", highlight=False)


def predict_cmd(
    op: str = typer.Argument(..., help="Op name, e.g. matmul."),
    shape: str = typer.Option("", "--shape", help="Parameters as k=v,... e.g. m=4096,n=4096,k=4096."),
    dtype: str = typer.Option(..., "--dtype", help="dtype as torch spells it (or tf32)."),
    device: str = typer.Option(..., "--device",
                               help="A device in the database, or a datasheet entry (e.g. 'H100 SXM')."),
    cache: str = typer.Option("cold", "--cache", help="cold (HBM roof) or hot (L2 roof)."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Intensity, ridge point, wall, roofline time and attainable FLOP/s of an op on a device."""
    from rooflab.reports.predict import parse_shape, predict
    from rooflab.vocab import CACHE_MODES

    if cache not in CACHE_MODES:
        fail(f"--cache: {escape(cache)!r} is not allowed; allowed: {', '.join(CACHE_MODES)}")
    df = _load(db)
    candidates = ambiguous_device(device, df)
    if candidates:
        fail(f"--device {escape(device)!r} is ambiguous: it matches {escape(', '.join(candidates))}; "
             f"give one of them, e.g. --device {escape(repr(candidates[0]))}")
    pred = _guard(lambda: predict(op, parse_shape(shape), dtype, device, df, cache=cache))
    if as_json:
        print_json(pred.as_dict())
        return
    table = Table(title=f"{escape(op)} {escape(dtype)} on {escape(pred.device)}", show_header=False)
    table.add_column("quantity")
    table.add_column("value", overflow="fold")
    rows = _collective_rows(pred) if pred.collective else [
        ("params", ",".join(f"{k}={v}" for k, v in pred.params.items())),
        ("FLOPs", f"{pred.flops:,}"), ("bytes", f"{pred.bytes:,}"),
        ("intensity", f"{_fmt(pred.intensity)} FLOP/byte"),
        ("compute roof", f"{_fmt(pred.compute_tflops)} TFLOP/s ({pred.compute_origin}: {pred.compute_source})"),
        ("bandwidth roof", f"{_fmt(pred.bandwidth_gbps)} GB/s ({pred.bandwidth_origin}: {pred.bandwidth_source})"),
        ("ridge point", f"{_fmt(pred.ridge_flop_per_byte)} FLOP/byte"),
        ("wall", pred.wall),
        ("roofline time", f"{_fmt(pred.roofline_ms)} ms"),
        ("attainable", f"{_fmt(pred.attainable_tflops)} TFLOP/s"),
        ("launch floor", f"{_fmt(pred.launch_floor_ms)} ms" if pred.launch_floor_ms else "not measured"),
    ]
    for k, v in rows:
        table.add_row(k, escape(str(v)))
    console.print(table)


def _collective_rows(pred: Any) -> list[tuple[str, str]]:
    return [
        ("params", ",".join(f"{k}={v}" for k, v in pred.params.items())),
        ("FLOPs (the reduction's adds)", f"{pred.flops:,}"), ("bus bytes (nccl-tests' S x factor)", f"{pred.bytes:,}"),
        ("interconnect roof",
         f"{_fmt(pred.bandwidth_gbps)} GB/s busbw ({pred.bandwidth_origin}: {pred.bandwidth_source})"),
        ("wall", pred.wall),
        ("roofline time", f"{_fmt(pred.roofline_ms)} ms"),
        ("latency floor", f"{_fmt(pred.launch_floor_ms)} ms" if pred.launch_floor_ms else "not measured"),
    ]


def ambiguous_device(device: str, df: pd.DataFrame) -> list[str]:
    """The devices `device` could mean when it names more than one (in the database, else in the
    datasheet table), else []. An exact name or key is never ambiguous; a datasheet entry matches
    when every word typed is a word of its key ("A100" matches four entries, "H100 PCIe" one)."""
    from rooflab.reports.frames import device_names
    from rooflab.reports.gpu_specs import SPECS

    text = " ".join(device.strip().lower().replace("_", " ").split())
    names = device_names(df) if df is not None and not df.empty else []
    if any(n.lower() == text for n in names):
        return []
    in_database = [n for n in names if text in n.lower()]
    if in_database:
        return in_database if len(in_database) > 1 else []
    keys = [spec.key for spec in SPECS]
    if any(k.lower() == text for k in keys):
        return []
    words = set(text.split())
    in_datasheet = [k for k in keys if words and words <= set(k.lower().split())]
    return in_datasheet if len(in_datasheet) > 1 else []


def compare_cmd(
    baseline: str = typer.Option(..., "--baseline", help="Device (name or fingerprint) or run id."),
    candidate: str = typer.Option(..., "--candidate", help="Device (name or fingerprint) or run id."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
    out: Path | None = typer.Option(None, "--out", help="Write the speedup and geometric-mean charts (SVG) here."),
    show_all: bool = typer.Option(False, "--all", help="Also list every case with its interval."),
) -> None:
    """Per-case speedup of the candidate over the baseline with its 95 % interval, beside the
    speedup the roofs predict; the runs paired are named, with the rule that paired them."""
    from rooflab.reports import compare_plots
    from rooflab.reports.comparison import compare_devices
    from rooflab.reports.load import load_comparison_inputs

    url = db_url(db)
    require_database(url)
    df, counts, evidence = _guard(lambda: load_comparison_inputs(url, baseline, candidate))
    if counts.empty:
        fail("the database holds no results yet: nothing to compare")
    cmp = _guard(lambda: compare_devices(df, counts, baseline, candidate, evidence=evidence))
    figures: list[str] = []
    folder = _out_dir(out)
    if folder is not None:
        for name, svg in (("speedup.svg", compare_plots.speedup_svg(cmp.cases, cmp.baseline, cmp.candidate)),
                          ("geomeans.svg", compare_plots.geomeans_svg(cmp.summary, cmp.baseline, cmp.candidate))):
            (folder / name).write_text(svg, encoding="utf-8")
            figures.append(str(folder / name))
    if as_json:
        print_json({"baseline": cmp.baseline, "candidate": cmp.candidate, "pairing": cmp.pairing.as_dict(),
                    "cases": _rows(cmp.cases), "summary": _rows(cmp.summary),
                    "most_deviating": _rows(cmp.deviating), "figures": figures})
        return
    _print_comparison(cmp, show_all)
    for figure in figures:
        console.print(f"wrote {escape(figure)}", highlight=False)


def _interval(value: Any, low: Any, high: Any) -> str:
    text = _fmt(value, 3)
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return text
    return f"{text} [{_fmt(low, 3)}, {_fmt(high, 3)}]"


def _print_comparison(cmp: Any, show_all: bool) -> None:
    console.print(f"paired runs: {escape(cmp.pairing.describe())}", highlight=False, soft_wrap=True)
    t = Table(title=f"{escape(cmp.candidate)} against {escape(cmp.baseline)}: {len(cmp.cases)} cases ok on both")
    for col in ("family", "dtype", "cases", "faster", "slower", "n.s.", "no CI", "left out",
                "speedup (geomean) [95 %]", "predicted (geomean)"):
        t.add_column(col)
    for _, r in cmp.summary.iterrows():
        t.add_row(escape(str(r["family"])), escape(str(r["dtype"])), str(r["cases"]), str(r["faster"]),
                  str(r["slower"]), str(r["not_significant"]), str(r["no_interval"]), str(r["left_out"]),
                  _interval(r["speedup_geomean"], r["speedup_low"], r["speedup_high"]), _fmt(r["predicted_geomean"], 3))
    console.print(t)
    console.print("n.s.: the 95 % interval contains 1; left out: untrusted (noisy or contended) or not comparable "
                  "(different flush methods)", highlight=False)
    d = Table(title="cases that deviate most from the prediction (outside its range)")
    for col in ("case", "wall", "speedup [95 %]", "predicted", "measured / predicted"):
        d.add_column(col, overflow="fold")
    for _, r in cmp.deviating.iterrows():
        ranged = r["predicted_low"] != r["predicted_high"]
        d.add_row(escape(r["case_key"]), escape(str(r["wall"])),
                  _interval(r["speedup"], r["speedup_low"], r["speedup_high"]),
                  _interval(r["predicted_speedup"], r["predicted_low"] if ranged else None,
                            r["predicted_high"] if ranged else None), _fmt(r["deviation"], 3))
    console.print(d)
    left = cmp.cases[~cmp.cases["standing"].isin(["faster", "slower", "not_significant", "no_interval"])]
    for _, r in left.head(20).iterrows():
        console.print(f"left out: {escape(r['case_key'])}: {escape(r['note'])}", highlight=False, soft_wrap=True)
    if len(left) > 20:
        console.print(f"... and {len(left) - 20} more left out (--json lists them)", highlight=False)
    if show_all:
        a = Table(title="every case")
        for col in ("case", "speedup [95 %]", "standing", "interval from", "note"):
            a.add_column(col, overflow="fold")
        for _, r in cmp.cases.iterrows():
            a.add_row(escape(r["case_key"]), _interval(r["speedup"], r["speedup_low"], r["speedup_high"]),
                      escape(str(r["standing"])), escape(str(r["interval"])), escape(str(r["note"])))
        console.print(a)


def _rows(frame) -> list[dict]:
    """Records for JSON: NaN as null; the Ratio objects behind the intervals left out."""
    frame = frame.drop(columns=[c for c in ("ratio",) if c in frame.columns])
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")]


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
) -> None:
    """Newest two results of every series against a robust baseline, and change points and drift
    over its history; exit 1 when --fail-on matches."""
    from rooflab.reports.load import load_verdicts
    from rooflab.reports.verdicts import DRIFT, Verdict, parse_fail_on, should_fail

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
    options = RegressionOptions(window=window, z_threshold=threshold, min_change=min_change)
    verdicts = _guard(lambda: load_verdicts(url, options))
    failing = should_fail(verdicts, fail_on)
    counts = {str(s): sum(v.status == s for v in verdicts) for s in Verdict}
    counts[DRIFT] = sum(v.drift is not None for v in verdicts)
    if as_json:
        print_json({"counts": counts, "fail_on": fail_on, "failed": failing,
                    "series": [v.as_dict() for v in verdicts if show_all or v.flagged]})
    else:
        shown = [v for v in verdicts if show_all or v.flagged]
        order = tuple(Verdict)  # the most urgent first
        shown.sort(key=lambda v: (order.index(v.status), v.case_key))
        t = Table(title=f"{len(verdicts)} series: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        for col in ("status", "case", "device", "newest ms", "baseline ms", "change", "z", "first bad run", "history",
                    "note"):
            t.add_column(col, overflow="fold")
        for v in shown:
            d = v.as_dict()
            first_bad = f"{d['first_bad_run']} ({d['first_bad_commit'] or 'no commit'})" if d["first_bad_run"] else ""
            history = [f"{c.direction} {100 * c.rel_change:+.1f} % at {c.run_id}" for c in v.change_points]
            if v.drift is not None:
                history.append(f"drift {100 * v.drift.rel_change:+.1f} % over {v.drift.n_points} runs")
            t.add_row(v.status, escape(v.case_key), escape(v.device_name), _fmt(d["latest_ms"]), _fmt(d["baseline_ms"]),
                      _pct(d["rel_change"]), _fmt(d["z"], 3), escape(first_bad), escape("; ".join(history)),
                      escape(v.note))
        console.print(t)
        if not verdicts:
            console.print("no results yet: nothing to check")
    if failing:
        err_console.print(f"failing: results match --fail-on {fail_on}", highlight=False)
        raise typer.Exit(1)


def report_cmd(
    out: Path = typer.Option(..., "--out", help="Folder for the static HTML site (index.html)."),
    db: str | None = DbOption,
    run: list[str] = typer.Option([], "--run",
                                  help="Device pages show this run (repeatable); default: each device's newest run."),
    since: str | None = typer.Option(None, "--since",
                                        help="Device pages show every run started on or after this date (YYYY-MM-DD)."),
) -> None:
    """Write the static HTML report (rooflines, diagnosis, comparison, regressions)."""
    from rooflab.db.urls import redact
    from rooflab.reports.breakdown_section import load_layer_profiles
    from rooflab.reports.html import render_report
    from rooflab.reports.interconnect_section import load_collectives
    from rooflab.reports.load import PendingVerdicts, load_counters, load_crosschecks, load_report_inputs
    from rooflab.reports.memory import keep_mmap_threshold

    if run and since:
        fail("give either --run or --since, not both")
    url = db_url(db)
    require_database(url)
    folder = output_dir(out)
    keep_mmap_threshold()
    # judged, and the history pages drawn and written, side by side with the reading and drawing below
    pending = PendingVerdicts(url, out_dir=folder, runs=run or None, since=since)
    try:
        inputs = _guard(lambda: load_report_inputs(url, runs=run or None, since=since, with_history=False))
        crosschecks = _guard(lambda: load_crosschecks(url))
        layer = _guard(lambda: load_layer_profiles(url))
        counters = _guard(lambda: load_counters(url))
        df = inputs.results
        groups = _guard(lambda: load_collectives(url, sorted(df["run_id"].astype(str).unique()) if not df.empty
                                                 else []))
        index = _guard(lambda: render_report(inputs.results, folder, source=redact(url), verdicts=pending.result,
                                             runs=run or None, since=since, counts=inputs.counts,
                                             crosschecks=crosschecks, layer_profiles=layer, counters=counters,
                                             collectives=groups, history=pending.pages, evidence=inputs.evidence))
    finally:
        pending.cancel()  # a report that failed before the regressions page leaves no process behind
    console.print(f"report: {escape(str(index))}", highlight=False, soft_wrap=True)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("roofline")(roofline_cmd)
    app.command("predict")(predict_cmd)
    app.command("compare")(compare_cmd)
    app.command("regressions")(regressions_cmd)
    app.command("report")(report_cmd)
