"""CLI: `compare`, each case's speedup between two devices or runs with its interval, beside what the
roofs predict (a thin wrapper over reports/comparisons/compare_devices.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from rooflab.reports.comparisons.compare_devices import Comparison, compare_devices
from rooflab.reports.comparisons.inputs import ComparisonInputs, load_comparison_inputs
from rooflab.reports.pages import compare_plots
from rooflab.reports.regressions.link_check import TableSpeedup, table_speedups
from rooflab.runners.cli.common import (
    DbOption,
    JsonOption,
    db_url,
    fmt,
    json_rows,
    optional_output_dir,
    require_database,
)
from rooflab.runners.cli.epilogue import console, fail, respond
from rooflab.vocab import SeriesBy


@dataclass(frozen=True)
class _Compared:
    """What `rooflab compare` found: the comparison, the collective tests over their sizes, the figures written."""
    comparison: Comparison
    tables: list[TableSpeedup]
    figures: list[str]
    sides: dict[str, dict[str, Any]]  # baseline, candidate -> what the side compares (_side_of)

    def to_json(self) -> dict[str, object]:
        cmp = self.comparison
        return {"baseline": cmp.baseline, "candidate": cmp.candidate, "sides": self.sides,
                "pairing": cmp.pairing.as_dict(),
                "cases": json_rows(cmp.cases), "summary": json_rows(cmp.summary),
                "most_deviating": json_rows(cmp.deviating), "figures": self.figures,
                "collective_tests": [t.as_dict() for t in self.tables]}


def compare_cmd(
    baseline: str = typer.Option(..., "--baseline",
                                 help="A device (its key: a GPU's UUID, or a prefix of it), a model (name or "
                                      "fingerprint: its median device in each case) or a run id."),
    candidate: str = typer.Option(..., "--candidate", help="As --baseline."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
    out: Path | None = typer.Option(None, "--out", help="Write the speedup and geometric-mean charts (SVG) here."),
    show_all: bool = typer.Option(False, "--all", help="Also list every case with its interval."),
) -> None:
    """Per-case speedup of the candidate over the baseline with its 95 % interval, beside the
    speedup the roofs predict; the runs paired are named, with the rule that paired them."""
    url = db_url(db)
    require_database(url)

    def work() -> _Compared:
        inputs = load_comparison_inputs(url, baseline, candidate)
        if inputs.counts.empty:
            fail("the database holds no results yet: nothing to compare")
        cmp = compare_devices(inputs.results, inputs.counts, inputs.names[baseline], inputs.names[candidate],
                              evidence=inputs.evidence, physical=[side.label for side in inputs.physical])
        figures: list[str] = []
        folder = optional_output_dir(out)
        if folder is not None:
            for name, svg in (("speedup.svg", compare_plots.speedup_svg(cmp.cases, cmp.baseline, cmp.candidate)),
                              ("geomeans.svg", compare_plots.geomeans_svg(cmp.summary, cmp.baseline, cmp.candidate))):
                (folder / name).write_text(svg, encoding="utf-8")
                figures.append(str(folder / name))
        tables = table_speedups(list(cmp.cases["case_key"]), list(cmp.cases["baseline_ms"]),
                                list(cmp.cases["candidate_ms"]))
        sides = {"baseline": _side_of(inputs, baseline, cmp.devices["baseline"]),
                 "candidate": _side_of(inputs, candidate, cmp.devices["candidate"])}
        return _Compared(cmp, tables, figures, sides)

    def show(found: _Compared) -> None:
        for name, side in found.sides.items():
            console.print(f"{name}: {escape(_side_words(side))}", highlight=False, soft_wrap=True)
        _print_comparison(found.comparison, show_all)
        _print_tables(found.tables)
        for figure in found.figures:
            console.print(f"wrote {escape(figure)}", highlight=False)

    respond(work, as_json=as_json, to_json=_Compared.to_json, show=show)


def _side_of(inputs: ComparisonInputs, text: str, devices: int) -> dict[str, Any]:
    """What a side compares: one physical device (its key, host and model), or a model's devices
    (the median device of each case, of up to `devices`)."""
    side = next((s for s in inputs.physical if s.label == inputs.names[text]), None)
    if side is not None:
        return {"by": str(SeriesBy.DEVICE), "device_key": side.key, "host": side.host, "device_name": side.model,
                "devices": 1}
    return {"by": str(SeriesBy.MODEL), "device_key": None, "host": None, "devices": devices}


def _side_words(side: dict[str, Any]) -> str:
    if side["by"] == SeriesBy.DEVICE:
        return f"the device {side['device_key']} ({side['device_name']}) on {side['host']}"
    if side["devices"] > 1:
        return f"the model's median device in each case (of up to {side['devices']} devices a run)"
    return "one device a run"


def _interval(value: Any, low: Any, high: Any) -> str:
    text = fmt(value, 3)
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return text
    return f"{text} [{fmt(low, 3)}, {fmt(high, 3)}]"


_SOURCES = {"bootstrap": "the raw samples of both sides (bootstrap)",
            "stored_ci": "the stored CIs of the medians (a side without raw samples: pruned, or imported)",
            "none": "nothing (the ratio alone)"}


def _sources(cases: Any) -> str:
    """How many cases' intervals come from each source, e.g. '117 from the stored CIs of the medians (...)'."""
    counts = cases["interval"].value_counts() if len(cases) else {}
    return "; ".join(f"{int(n)} from {_SOURCES.get(str(k), str(k))}" for k, n in counts.items()) or "no cases"


def _print_comparison(cmp: Comparison, show_all: bool) -> None:
    console.print(f"paired runs: {escape(cmp.pairing.describe())}", highlight=False, soft_wrap=True)
    t = Table(title=f"{escape(cmp.candidate)} against {escape(cmp.baseline)}: {len(cmp.cases)} cases ok on both")
    for col in ("family", "dtype", "cases", "faster", "slower", "n.s.", "no CI", "left out",
                "speedup (geomean) [95 %]", "predicted (geomean)"):
        t.add_column(col)
    for _, r in cmp.summary.iterrows():
        t.add_row(escape(str(r["family"])), escape(str(r["dtype"])), str(r["cases"]), str(r["faster"]),
                  str(r["slower"]), str(r["not_significant"]), str(r["no_interval"]), str(r["left_out"]),
                  _interval(r["speedup_geomean"], r["speedup_low"], r["speedup_high"]), fmt(r["predicted_geomean"], 3))
    console.print(t)
    console.print("n.s.: the 95 % interval contains 1; each interval holds the samples' noise and the run-to-run "
                  "spread of the devices' recent runs (per case, in --all and --json); left out: untrusted (noisy "
                  "or contended) or not comparable (different flush methods or paces)", highlight=False)
    console.print(f"intervals from: {_sources(cmp.cases)}", highlight=False)
    d = Table(title="cases that deviate most from the prediction (outside its range)")
    for col in ("case", "wall", "speedup [95 %]", "predicted", "measured / predicted"):
        d.add_column(col, overflow="fold")
    for _, r in cmp.deviating.iterrows():
        ranged = r["predicted_low"] != r["predicted_high"]
        d.add_row(escape(r["case_key"]), escape(str(r["wall"])),
                  _interval(r["speedup"], r["speedup_low"], r["speedup_high"]),
                  _interval(r["predicted_speedup"], r["predicted_low"] if ranged else None,
                            r["predicted_high"] if ranged else None), fmt(r["deviation"], 3))
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


def _print_tables(tables: list[TableSpeedup]) -> None:
    """Each collective test over its message sizes (reports.regressions.link_check.table_speedups): an interval
    where its cases have none of their own (a tool that printed one figure per size)."""
    if not tables:
        return
    t = Table(title="collective tests over their sizes that move data (each size one observation)")
    for col in ("test", "sizes", "speedup (geomean) [95 %, t over sizes]", "standing"):
        t.add_column(col, overflow="fold")
    for s in tables:
        t.add_row(escape(s.table), str(s.sizes), _interval(s.speedup, s.low, s.high), s.standing)
    console.print(t)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
