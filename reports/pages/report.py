"""The static HTML report: index with run metadata, a page per device, the generation comparison,
the regression page and the history pages. Jinja2 templates (autoescape on); figures are SVG files
next to the pages; no external URL is referenced, so the folder can be copied anywhere and opened
offline. The only script is the history page's own (templates/history.js, inside the page).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import pandas as pd

from rooflab.db.handle import Db, shown
from rooflab.db.timeparse import Since
from rooflab.reports.comparisons.compare_devices import Evidence
from rooflab.reports.data.devices import device_keys
from rooflab.reports.data.frames import device_names
from rooflab.reports.data.run_counts import counts_of
from rooflab.reports.data.side_reads import (
    LayerProfiles,
    load_collectives,
    load_counters,
    load_crosschecks,
    load_layer_profiles,
)
from rooflab.reports.fleet.link_records import LinksNight
from rooflab.reports.fleet.records import FleetNight
from rooflab.reports.fleet.status import FleetStatus
from rooflab.reports.pages import plots
from rooflab.reports.pages.breakdown_section import section as breakdown_section
from rooflab.reports.pages.compare_page import compare_page
from rooflab.reports.pages.crosscheck_page import crosscheck_page
from rooflab.reports.pages.device_roofline import DeviceRoofline, device_roofline
from rooflab.reports.pages.fleet_page import fleet_page, links_page, load_fleet_night, load_links_night
from rooflab.reports.pages.history_judge import judge_history
from rooflab.reports.pages.history_page import history_site
from rooflab.reports.pages.interconnect_section import section as interconnect_section
from rooflab.reports.pages.report_inputs import load_report_inputs
from rooflab.reports.pages.slugs import slug
from rooflab.reports.pages.templating import environment, missing, num
from rooflab.reports.regressions.history_points import HistoryData, history_of_frame
from rooflab.reports.regressions.series import detect
from rooflab.reports.regressions.verdicts import SHOWN_VERDICTS, Verdict
from rooflab.reports.roofs.models import DeviceCeilings
from rooflab.reports.roofs.shown_runs import DeviceRuns, choose_runs, chosen_runs
from rooflab.reports.walls import counters_check as counters_mod
from rooflab.reports.walls.diagnosis import diagnose, fusion_gains, most_left_on_table
from rooflab.vocab import FAULTS, ResultStatus

TEMPLATES = Path(__file__).with_name("templates")
MAX_TREND_PLOTS = 60


# the names the site's modules and tests use for the template environment and its number format
_env, _num, _missing = environment, num, missing


def _records(df: pd.DataFrame, columns: list[str]) -> list[dict]:
    if df is None or df.empty:
        return []
    cols = [c for c in columns if c in df.columns]
    return [{c: (None if _missing(v) else v) for c, v in zip(cols, row, strict=True)}
            for row in df[cols].itertuples(index=False)]


def _runs_table(counts: pd.DataFrame, shown: set[str] | None = None) -> list[dict]:
    """One row per run, newest first, from the counts frame (reports.data.run_counts.counts_of or
    db.query.result_counts); `shown`: the runs the device pages show."""
    if counts.empty:
        return []
    n = counts["n"].astype(int)
    groups = counts.groupby("run_id", sort=False)
    firsts = groups[["run_order", "started_at", "host", "suite", "git_commit"]].first()
    devices = groups["device_name"].agg(
        lambda names: ", ".join(sorted(str(d) for d in names.dropna().unique() if str(d))))
    total = n.groupby(counts["run_id"], sort=False).sum()
    ok = n.where(counts["status"] == ResultStatus.OK, 0).groupby(counts["run_id"], sort=False).sum()
    failed = (n.where(counts["status"].isin(FAULTS), 0)
              .groupby(counts["run_id"], sort=False).sum())
    out = []
    for run_id in total.index:
        out.append({
            "run_id": run_id, **{c: _first(firsts, run_id, c) for c in ("started_at", "host", "suite", "git_commit")},
            "devices": devices[run_id], "results": int(total[run_id]), "ok": int(ok[run_id]),
            "failed": int(failed[run_id]),
            "shown": bool(shown and run_id in shown), "_order": firsts.at[run_id, "run_order"],
        })
    out.sort(key=lambda r: (float(r["_order"]) if not _missing(r["_order"]) else 0.0, str(r["run_id"])), reverse=True)
    return [{k: v for k, v in r.items() if k != "_order"} for r in out]


def _first(firsts: pd.DataFrame, run_id: Any, column: str) -> Any:
    """The run's first non-null value of `column` (None when it has none), as first_value gives it."""
    if column not in firsts.columns:
        return None
    value = firsts.at[run_id, column]
    return None if _missing(value) else value


def _environments(rows: pd.DataFrame) -> list[dict]:
    cols = ["device_fingerprint", "driver_version", "cuda_version", "torch_version", "compute_capability", "sm_count",
            "l2_bytes", "memory_bytes"]
    cols = [c for c in cols if c in rows.columns]
    env = rows[cols].drop_duplicates("device_fingerprint")
    return _records(env, cols)


def physical_devices(rows: pd.DataFrame) -> list[dict]:
    """The physical devices of a device page's results (reports.data.devices: each its own series),
    with their host, results and ok results in the shown runs, and the history page's filter that
    shows their series."""
    if rows.empty:
        return []
    keyed = rows.assign(_key=device_keys(rows).astype(str), _ok=rows["status"] == ResultStatus.OK,
                        _host=rows["host"].astype(object).fillna("") if "host" in rows.columns else "")
    out = []
    for key, mine in keyed.groupby("_key", sort=True):
        host = str(mine["_host"].iloc[-1])
        out.append({"device_key": key, "host": host, "results": len(mine), "ok": int(mine["_ok"].sum()),
                    "history": "history.html#" + urlencode({"device": f"{host} {key}" if host else key},
                                                           quote_via=quote)})
    return out


def _write_svg(out: Path, name: str, svg: str) -> str:
    (out / "figures").mkdir(exist_ok=True)
    (out / "figures" / name).write_text(svg, encoding="utf-8")
    return f"figures/{name}"


def render_report(
    df: pd.DataFrame,
    out_dir: str | Path,
    *,
    source: str = "",
    verdicts: list | Callable[[], list] | None = None,
    runs: list[str] | None = None,
    since: Since = None,
    counts: pd.DataFrame | None = None,
    crosschecks: pd.DataFrame | None = None,
    layer_profiles: LayerProfiles | None = None,
    counters: pd.DataFrame | None = None,
    collectives: pd.DataFrame | None = None,
    history: HistoryData | Callable[[], list] | None = None,
    evidence: Evidence | None = None,
    fleet: FleetNight | None = None,
    links: LinksNight | None = None,
) -> Path:
    """Write the site for the results frame `df` into `out_dir`; returns the path of index.html.

    Each device page shows the newest run of that device, or the `runs` / the runs `since` a date
    (reports.roofs.shown_runs). `counts`: db.query.result_counts of the database when `df` holds only the
    runs the pages need (write_report); by default computed from `df`. `verdicts`: the regression
    verdicts of the history when already computed (reports.regressions.database_check.detect_in_database); a callable
    that returns them is called when the regressions page is drawn, after the device and comparison
    pages; by default `detect(df)`. `crosschecks`: the cross-check rows (db.crosscheck.crosscheck_frame);
    when there are any, crosscheck.html. `layer_profiles`: the profiled blocks
    (reports.data.side_reads.load_layer_profiles), for the breakdown section. `counters`: the counter
    readings (db.counters.counters_frame), for the model-against-counters section and the diagnosis.
    `collectives`: the groups collectives ran in (reports.data.side_reads.load_collectives), for
    the stragglers of the interconnect section. `history`: every series' points
    (reports.pages.report_inputs.load_report_inputs), or a callable that returns once the history pages are written
    into `out_dir` elsewhere (reports.pages.history_judge.PendingVerdicts.pages); by default framed from `df`.
    `evidence`: the comparison's raw samples and launch floors (by default the launch results of
    `df`, no samples). `fleet`: the judgement of the newest health night (reports.pages.fleet_page
    .load_fleet_night); when given, fleet.html. `links`: the judgement of the newest links night's
    matrices (load_links_night); when given, links.html."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = _env()
    extra = _device_inputs(df, runs=runs, since=since, counts=counts, counters=counters,
                           layer_profiles=layer_profiles, collectives=collectives)
    counts, plans = extra.counts, extra.plans
    pages: dict[str, str] = {}
    devices: list[dict] = []
    ceilings_by_device: dict[str, DeviceCeilings] = {}
    for page, html, entry, roofline in _device_pages(env, out, df, extra):
        pages[page] = html
        devices.append(entry)
        ceilings_by_device[roofline.name] = roofline.ceilings
    has_compare = len(devices) >= 2
    if has_compare:
        pages["compare.html"] = compare_page(env, lambda n, svg: _write_svg(out, n, svg), slug, ceilings_by_device,
                                             df, counts, evidence, chosen_runs(plans, runs, since))
    if callable(verdicts):  # still being judged elsewhere (pages.history_judge.PendingVerdicts): wait for them now
        verdicts = verdicts()
    if verdicts is None:
        verdicts = detect(df) if not df.empty else []
    pages["regressions.html"] = _regressions_page(env, out, verdicts)
    pages.update(_history_pages(env, history, df, verdicts, has_compare))
    has_crosscheck = crosschecks is not None and not crosschecks.empty
    if has_crosscheck:
        pages["crosscheck.html"] = crosscheck_page(env, lambda name, svg: _write_svg(out, name, svg), crosschecks, slug)
    if fleet is not None:
        pages["fleet.html"] = fleet_page(env, lambda name, svg: _write_svg(out, name, svg), slug, fleet)
    if links is not None:
        pages["links.html"] = links_page(env, lambda name, svg: _write_svg(out, name, svg), links)
    shown = {r for p in plans.values() for r in p.shown}
    pages["index.html"] = env.get_template("index.html").render(
        title="rooflab report", source=source, runs=_runs_table(counts, shown), devices=devices,
        has_compare=has_compare,
        empty=df.empty, n_results=int(counts["n"].sum()) if not counts.empty else 0, has_crosscheck=has_crosscheck,
        alerts={str(s): sum(v.status == s for v in verdicts) for s in SHOWN_VERDICTS},
        fleet=_fleet_summary(fleet), links=links.counts() if links is not None else None,
    )
    for name, html in pages.items():
        (out / name).write_text(html, encoding="utf-8")
    return out / "index.html"


def _fleet_summary(fleet: FleetNight | None) -> dict[str, Any] | None:
    """What the index says of the fleet's night (None without one)."""
    if fleet is None:
        return None
    return {"suite": fleet.night.suite, "first_run_at": fleet.night.first_run_at,
            "counts": {str(s): fleet.count(s) for s in FleetStatus}, "devices": len(fleet.devices),
            "shifts": len(fleet.fleet_shifts)}


@dataclass(frozen=True)
class _DeviceInputs:
    """What every device page reads beside its own results: the run counts, the runs each device
    shows (reports.roofs.shown_runs.choose_runs), the counter readings, the profiled blocks and the
    groups collectives ran in."""

    counts: pd.DataFrame
    plans: dict[str, DeviceRuns]
    counters: pd.DataFrame | None
    layer_profiles: LayerProfiles | None
    collectives: pd.DataFrame | None


def _device_inputs(df: pd.DataFrame, *, runs: list[str] | None, since: Since, counts: pd.DataFrame | None,
                   counters: pd.DataFrame | None, layer_profiles: LayerProfiles | None,
                   collectives: pd.DataFrame | None) -> _DeviceInputs:
    """The device pages' inputs, as render_report's arguments of the same names give them."""
    if counts is None:
        counts = counts_of(df)
    plans = choose_runs(counts, runs=runs, since=since)
    return _DeviceInputs(counts, plans, counters, layer_profiles, collectives)


def _device_pages(env: jinja2.Environment, out: Path, df: pd.DataFrame, extra: _DeviceInputs,
                  only: str | None = None) -> Iterator[tuple[str, str, dict, DeviceRoofline]]:
    """(file name, HTML, the index's entry, the roofline) of each device's page (of device `only`
    alone when given), in the order of reports.data.frames.device_names; figures are written into `out`."""
    for name in device_names(df):
        if name in extra.plans and (only is None or name == only):
            roofline = device_roofline(name, df[df["device_name"] == name], extra.plans[name])
            yield *_device_page(env, out, roofline, extra), roofline


def render_device_page(df: pd.DataFrame, device: str, out_dir: str | Path, *, runs: list[str] | None = None,
                       since: Since = None, counters: pd.DataFrame | None = None,
                       layer_profiles: LayerProfiles | None = None,
                       collectives: pd.DataFrame | None = None) -> Path:
    """Write the page of the device named `device` (its full name), and its figures, into `out_dir`
    exactly as render_report writes it for the same arguments, and nothing else; returns the page's
    path. For a caller that reads one device's page (a test of one of its sections) and need not
    draw the whole site. ValueError when `df` has no results of that device in the runs chosen."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = _device_inputs(df, runs=runs, since=since, counts=None, counters=counters,
                           layer_profiles=layer_profiles, collectives=collectives)
    for page, html, _, _ in _device_pages(_env(), out, df, extra, only=device):
        (out / page).write_text(html, encoding="utf-8")
        return out / page
    raise ValueError(f"no device page for {device!r}: the devices shown are {', '.join(map(str, extra.plans))}")


def _device_page(env: jinja2.Environment, out: Path, roofline: DeviceRoofline,
                 extra: _DeviceInputs) -> tuple[str, str, dict]:
    """(file name, HTML, the index's entry) of one device's page; its figures are written into `out`."""
    rows, dc, plan, s = roofline.rows, roofline.ceilings, roofline.plan, slug(roofline.name)
    readings = counters_mod.latest_readings(extra.counters, rows)
    diag = counters_mod.annotate(diagnose(rows, dc), readings)
    ctx = {
        "title": f"rooflab: {roofline.name}", "device": roofline.name, "spec": dc.spec, "l2_bytes": dc.l2_bytes,
        "is_cpu": roofline.on_cpu,
        "ceilings": [c.as_dict() for c in dc.ceilings], "plan": plan, "run_info": _run_info(extra.counts, plan),
        "environments": _environments(rows), "physical": physical_devices(rows),
        "roofline_svg": roofline.roofline_svg(inline=True),
        "bandwidth_svg": _write_svg(out, f"bandwidth-{s}.svg", roofline.bandwidth_svg()),
        **_diagnosis_tables(diag),
        "counters": counters_mod.section(readings),
        "points": _records(plots.roofline_points(rows), list(plots.POINT_COLUMNS)),
        "fusion": _records(gains := fusion_gains(rows), list(gains.columns)),
        "breakdown": breakdown_section(extra.layer_profiles, rows, dc, plan.shown),
        "interconnect": interconnect_section(rows, dc, extra.collectives, lambda n, svg: _write_svg(out, n, svg), s),
    }
    entry = {"name": roofline.name, "page": f"device-{s}.html", "spec": dc.spec.key if dc.spec else None,
             "environments": ctx["environments"], "runs": ", ".join(plan.shown),
             "fingerprints": sorted(str(f) for f in rows["device_fingerprint"].dropna().unique()),
             "results": len(rows), "ok": int((rows["status"] == ResultStatus.OK).sum())}
    return f"device-{s}.html", env.get_template("device.html").render(**ctx), entry


def _diagnosis_tables(diag: pd.DataFrame) -> dict[str, Any]:
    """The device page's walls, counts by quality, the cases furthest from their roofs and the
    whole diagnosis, from the diagnosis annotated with the counters."""
    return {
        "walls": diag["wall"].value_counts().to_dict() if not diag.empty else {}, "n_cases": len(diag),
        "quality_counts": diag["quality"].value_counts().to_dict() if not diag.empty else {},
        "left": _records(most_left_on_table(diag, limit=25), ["case_key", "wall", "median_ms", "roofline_ms",
                                                              "efficiency", "left_ms", "tflops", "gbps",
                                                              "compute_roof_origin", "bandwidth_roof_origin",
                                                              "quality", "roof_suspect"]),
        "diagnosis": _records(diag.sort_values(["family", "op", "case_key"]) if not diag.empty else diag,
                              ["case_key", "family", "wall", "wall_roof", "median_ms", "roofline_ms",
                               "efficiency", "intensity", "tflops", "gbps", "quality", "roof_suspect", "run_id",
                               "power_w", "note", "elementary_missing", *counters_mod.COUNTED_COLUMNS]),
    }


def _history_pages(env: jinja2.Environment, history: HistoryData | Callable[[], list] | None, df: pd.DataFrame,
                   verdicts: list, has_compare: bool) -> dict[str, str]:
    """The history pages to write (none when a callable says they were written elsewhere)."""
    if callable(history):  # written into the folder elsewhere (pages.history_judge.judge_history): wait for them
        history()
        return {}
    if history is None and not df.empty:
        history = history_of_frame(df)
    return history_site(env, history, verdicts, slug, has_compare=has_compare)


def _run_info(counts: pd.DataFrame, plan: DeviceRuns) -> dict[str, dict]:
    """run id -> started_at, host, suite of the runs a device page names."""
    wanted = set(plan.shown) | set(plan.roof_runs)
    sub = counts[counts["run_id"].isin(wanted)].drop_duplicates("run_id")
    return {str(r["run_id"]): {"started_at": r["started_at"], "host": r["host"], "suite": r["suite"]}
            for _, r in sub.iterrows()}


def _regressions_page(env: jinja2.Environment, out: Path, verdicts: list) -> str:
    order = tuple(Verdict)  # the most urgent first
    flagged = [v for v in verdicts if v.flagged]
    flagged.sort(key=lambda v: (order.index(v.status), v.drift is None,
                                -abs(v.latest.rel_change) if v.latest is not None else 0.0, v.case_key))
    items = []
    for i, v in enumerate(flagged):
        d = v.as_dict()
        if i < MAX_TREND_PLOTS:
            d["svg"] = _write_svg(out, f"trend-{slug(v.case_key + '@' + v.key[1])}.svg", plots.trend_svg(v))
        items.append(d)
    counts: dict[str, int] = {str(s): sum(v.status == s for v in verdicts) for s in order}
    counts["drift"] = sum(v.drift is not None for v in verdicts)
    return env.get_template("regressions.html").render(title="rooflab: regressions", items=items, counts=counts,
                                                       n_series=len(verdicts), max_plots=MAX_TREND_PLOTS)


def write_report(db_url: Db, out_dir: str | Path, *, runs: list[str] | None = None, since: Since = None) -> Path:
    """Write the site for the database at `db_url` (a URL or a db.handle.Database); returns
    index.html. Reads the history (run counts, case runs), then only the runs the device and
    comparison pages show (and their roof runs), and judges the history (the verdicts and the
    history pages, reports.pages.history_judge.judge_history)."""
    inputs = load_report_inputs(db_url, runs=runs, since=since, with_history=False)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    verdicts, written = judge_history(db_url, out_dir=Path(out_dir), runs=runs, since=since)
    df = inputs.results
    run_ids = sorted(df["run_id"].astype(str).unique()) if not df.empty else []
    return render_report(df, out_dir, source=shown(db_url), verdicts=verdicts, runs=runs,
                         since=since, counts=inputs.counts, crosschecks=load_crosschecks(db_url),
                         layer_profiles=load_layer_profiles(db_url), counters=load_counters(db_url),
                         collectives=load_collectives(db_url, run_ids), history=lambda: written,
                         evidence=inputs.evidence, fleet=load_fleet_night(db_url), links=load_links_night(db_url))
