"""CLI: `roofline` and `predict`, a device's measured roofs and what they predict for a case (thin
wrappers over reports/)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from rooflab.reports.data.reads import ROOFLINE_COLUMNS, load_device_results
from rooflab.reports.data.run_counts import counts_of
from rooflab.reports.pages.device_roofline import device_roofline
from rooflab.reports.pages.slugs import slug
from rooflab.reports.roofs.shown_runs import choose_runs
from rooflab.reports.walls.predict import ambiguous_device, parse_shape, predict
from rooflab.runners.cli.common import (
    DbOption,
    JsonOption,
    db_url,
    fmt,
    optional_output_dir,
    pct,
    require_database,
)
from rooflab.runners.cli.epilogue import conclude, console, fail, guarded, respond
from rooflab.runners.cli.reading import load_results_or_fail
from rooflab.vocab import CACHE_MODES, CeilingKind

if TYPE_CHECKING:  # the reports' modules load pandas: only when the command runs
    from rooflab.reports.pages.device_roofline import DeviceRoofline
    from rooflab.reports.roofs.shown_runs import DeviceRuns
    from rooflab.reports.walls.predict import Prediction


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
    url = db_url(db)
    require_database(url)
    name, rows = guarded(lambda: load_device_results(url, device, ROOFLINE_COLUMNS))
    plan = guarded(lambda: choose_runs(counts_of(rows), runs=run or None, since=since)).get(name)
    if plan is None:
        fail(f"--run/--since: no results of {escape(name)} in the chosen runs")
    roofline = device_roofline(name, rows, plan)
    figures: list[str] = []
    folder = optional_output_dir(out)
    if folder is not None:
        for kind, svg in (("roofline", roofline.roofline_svg()), ("bandwidth", roofline.bandwidth_svg())):
            path = folder / f"{kind}-{slug(name)}.svg"
            path.write_text(svg, encoding="utf-8")
            figures.append(str(path))
    conclude((roofline, plan, figures), as_json=as_json, show=_print_roofline,
             to_json=lambda found: {**found[0].ceilings.as_dict(), "shown_runs": list(found[1].shown),
                                    "roof_runs": list(found[1].roof_runs), "figures": found[2]})


def _print_roofline(found: tuple[DeviceRoofline, DeviceRuns, list[str]]) -> None:
    roofline, plan, figures = found
    name, dc, llc = roofline.name, roofline.ceilings, roofline.on_cpu
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
        table.add_row(str(i), escape(label), f"{fmt(c.value)} {c.unit}" + (" *" if c.raised else ""),
                      fmt(c.datasheet), pct(c.ratio), escape(c.method))
        line = f"[{i}] {c.case_key}  (run {c.run_id})"
        if c.raised:
            line += f"\n    * raised: this result beat the probe's {fmt(c.probe_value)} {c.unit} ({c.probe_case_key})"
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
    if cache not in CACHE_MODES:
        fail(f"--cache: {escape(cache)!r} is not allowed; allowed: {', '.join(CACHE_MODES)}")
    df = load_results_or_fail(db)
    candidates = ambiguous_device(device, df)
    if candidates:
        fail(f"--device {escape(device)!r} is ambiguous: it matches {escape(', '.join(candidates))}; "
             f"give one of them, e.g. --device {escape(repr(candidates[0]))}")
    respond(lambda: predict(op, parse_shape(shape), dtype, device, df, cache=cache), as_json=as_json,
            to_json=lambda pred: pred.as_dict(), show=lambda pred: _print_prediction(op, dtype, pred))


def _print_prediction(op: str, dtype: str, pred: Prediction) -> None:
    table = Table(title=f"{escape(op)} {escape(dtype)} on {escape(pred.device)}", show_header=False)
    table.add_column("quantity")
    table.add_column("value", overflow="fold")
    rows = _collective_rows(pred) if pred.collective else [
        ("params", ",".join(f"{k}={v}" for k, v in pred.params.items())),
        ("FLOPs", f"{pred.flops:,}"), ("bytes", f"{pred.bytes:,}"),
        ("intensity", f"{fmt(pred.intensity)} FLOP/byte"),
        ("compute roof", f"{fmt(pred.compute_tflops)} TFLOP/s ({pred.compute_origin}: {pred.compute_source})"),
        ("bandwidth roof", f"{fmt(pred.bandwidth_gbps)} GB/s ({pred.bandwidth_origin}: {pred.bandwidth_source})"),
        ("ridge point", f"{fmt(pred.ridge_flop_per_byte)} FLOP/byte"),
        ("wall", pred.wall or "none (no work, and no floor known)"),
        ("roofline time", f"{fmt(pred.roofline_ms)} ms"),
        ("attainable", f"{fmt(pred.attainable_tflops)} TFLOP/s"),
        ("launch floor", f"{fmt(pred.launch_floor_ms)} ms" if pred.launch_floor_ms else "not measured"),
    ]
    for k, v in rows:
        table.add_row(k, escape(str(v)))
    console.print(table)


def _collective_rows(pred: Prediction) -> list[tuple[str, str]]:
    return [
        ("params", ",".join(f"{k}={v}" for k, v in pred.params.items())),
        ("FLOPs (the reduction's adds)", f"{pred.flops:,}"), ("bus bytes (nccl-tests' S x factor)", f"{pred.bytes:,}"),
        ("interconnect roof",
         f"{fmt(pred.bandwidth_gbps)} GB/s busbw ({pred.bandwidth_origin}: {pred.bandwidth_source})"),
        ("wall", pred.wall or "none (no work, and no floor known)"),
        ("roofline time", f"{fmt(pred.roofline_ms)} ms"),
        ("latency floor", f"{fmt(pred.launch_floor_ms)} ms" if pred.launch_floor_ms else "not measured"),
    ]


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("roofline")(roofline_cmd)
    app.command("predict")(predict_cmd)
