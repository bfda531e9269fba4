"""The static HTML report: index with run metadata, a page per device, the generation comparison
and the regression page. Jinja2 templates (autoescape on); figures are SVG files next to the pages;
no external URL is referenced, so the folder can be copied anywhere and opened offline.
"""
from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from reports import compare as cmp_mod
from reports import plots
from reports.breakdown_section import LayerProfiles, section as breakdown_section
from reports.ceilings import compute_ceilings
from reports.diagnosis import diagnose, fusion_gains, most_left_on_table
from reports.frames import device_names, first_value
from reports.regressions import detect

TEMPLATES = Path(__file__).with_name("templates")
MAX_TREND_PLOTS = 60


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    env.filters["pct"] = lambda v: "" if _missing(v) else f"{100 * float(v):.1f} %"
    return env


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def _num(v: Any, digits: int = 4) -> str:
    if _missing(v):
        return ""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        f = float(v)
        if f == 0:
            return "0"
        if abs(f) >= 1e6 or abs(f) < 1e-3:
            return f"{f:.{digits - 1}e}"
        return f"{f:.{digits}g}"
    return str(v)


def slug(text: str) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "x"
    return f"{base}-{hashlib.sha1(text.encode()).hexdigest()[:6]}"


def _records(df: pd.DataFrame, columns: list[str]) -> list[dict]:
    if df is None or df.empty:
        return []
    cols = [c for c in columns if c in df.columns]
    return [{c: (None if _missing(v) else v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False)]


def _runs_table(df: pd.DataFrame) -> list[dict]:
    if df.empty:
        return []
    order = "run_order" if "run_order" in df.columns else "started_at"
    groups = df.groupby("run_id", sort=False)
    firsts = groups[[c for c in ("started_at", "host", "suite", "git_commit") if c in df.columns]].first()
    devices = groups["device_name"].agg(lambda names: ", ".join(sorted(str(d) for d in names.dropna().unique())))
    ok = (df["status"] == "ok").groupby(df["run_id"], sort=False).sum()
    failed = df["status"].isin(["failed", "crashed", "incorrect"]).groupby(df["run_id"], sort=False).sum()
    sizes, orders = groups.size(), groups[order].min()
    out = []
    for run_id in sizes.index:
        out.append({
            "run_id": run_id, **{c: _first(firsts, run_id, c) for c in ("started_at", "host", "suite", "git_commit")},
            "devices": devices[run_id], "results": int(sizes[run_id]), "ok": int(ok[run_id]), "failed": int(failed[run_id]),
            "_order": orders[run_id],
        })
    return [{k: v for k, v in r.items() if k != "_order"} for r in sorted(out, key=lambda r: (str(r["_order"]), str(r["run_id"])), reverse=True)]


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


def _write_svg(out: Path, name: str, svg: str) -> str:
    (out / "figures").mkdir(exist_ok=True)
    (out / "figures" / name).write_text(svg, encoding="utf-8")
    return f"figures/{name}"


def render_report(df: pd.DataFrame, out_dir: str | Path, *, source: str = "", verdicts: list | None = None,
                  layer_profiles: LayerProfiles | None = None) -> Path:
    """Write the site for the results frame `df` into `out_dir`; returns the path of index.html.

    `verdicts`: the regression verdicts of `df`'s history when already computed (e.g. by
    reports.regressions.detect_in_database); by default `detect(df)`. `layer_profiles`: the profiled
    blocks (reports.breakdown_section.load_layer_profiles), for the breakdown section."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = _env()
    names = device_names(df)
    pages: dict[str, str] = {}
    devices: list[dict] = []
    ceilings_by_device = {}
    for name in names:
        rows = df[df["device_name"] == name]
        dc = compute_ceilings(rows, name)
        ceilings_by_device[name] = (rows, dc)
        s = slug(name)
        diag = diagnose(rows, dc)
        walls = diag["wall"].value_counts().to_dict() if not diag.empty else {}
        ctx = {
            "title": f"rooflab: {name}", "device": name, "spec": dc.spec, "l2_bytes": dc.l2_bytes,
            "ceilings": [c.as_dict() for c in dc.ceilings],
            "environments": _environments(rows),
            "roofline_svg": _write_svg(out, f"roofline-{s}.svg", plots.roofline_svg(rows, dc)),
            "bandwidth_svg": _write_svg(out, f"bandwidth-{s}.svg", plots.bandwidth_svg(rows, dc.l2_bytes, name)),
            "walls": walls, "n_cases": len(diag),
            "left": _records(most_left_on_table(diag, limit=25), ["case_key", "wall", "median_ms", "roofline_ms",
                                                                  "efficiency", "left_ms", "tflops", "gbps",
                                                                  "compute_roof_origin", "bandwidth_roof_origin"]),
            "diagnosis": _records(diag.sort_values(["family", "op", "case_key"]) if not diag.empty else diag,
                                  ["case_key", "family", "wall", "median_ms", "roofline_ms", "efficiency",
                                   "intensity", "tflops", "gbps"]),
            "fusion": _records(gains := fusion_gains(rows), list(gains.columns)),
            "breakdown": breakdown_section(layer_profiles, rows, dc),
        }
        pages[f"device-{s}.html"] = env.get_template("device.html").render(**ctx)
        devices.append({"name": name, "page": f"device-{s}.html", "spec": dc.spec.key if dc.spec else None,
                        "environments": ctx["environments"],
                        "fingerprints": sorted(str(f) for f in rows["device_fingerprint"].dropna().unique()),
                        "results": len(rows), "ok": int((rows["status"] == "ok").sum())})
    has_compare = len(names) >= 2
    if has_compare:
        pages["compare.html"] = _compare_page(env, out, ceilings_by_device)
    if verdicts is None:
        verdicts = detect(df) if not df.empty else []
    pages["regressions.html"] = _regressions_page(env, out, verdicts)
    pages["index.html"] = env.get_template("index.html").render(
        title="rooflab report", source=source, runs=_runs_table(df), devices=devices, has_compare=has_compare,
        empty=df.empty, n_results=len(df),
        alerts={s: sum(v.status == s for v in verdicts) for s in ("regression", "suspect", "improvement")},
    )
    for name, html in pages.items():
        (out / name).write_text(html, encoding="utf-8")
    return out / "index.html"


def _compare_page(env: jinja2.Environment, out: Path, by_device: dict) -> str:
    """Every device against the one with the lowest measured (else datasheet) HBM bandwidth."""
    def hbm(item):
        rows, dc = item[1]
        c = dc.get("hbm_rw")
        return (c.value if c else (dc.spec.memory_gbps.value if dc.spec else math.inf), item[0])

    ordered = sorted(by_device.items(), key=hbm)
    base_name, (base_rows, base_dc) = ordered[0]
    base = cmp_mod.Side(base_name, base_name, base_rows, base_dc)
    sections = []
    for name, (rows, dc) in ordered[1:]:
        cmp = cmp_mod.compare(base, cmp_mod.Side(name, name, rows, dc))
        sections.append({
            "candidate": name,
            "summary": _records(cmp_mod.summary(cmp), ["family", "dtype", "cases", "speedup_geomean", "predicted_geomean"]),
            "deviating": _records(cmp_mod.most_deviating(cmp), ["case_key", "wall", "speedup", "predicted_speedup", "deviation"]),
            "svg": _write_svg(out, f"speedup-{slug(name)}.svg", plots.speedup_svg(cmp, base_name, name)),
            "n": len(cmp),
        })
    return env.get_template("compare.html").render(title="rooflab: generation comparison", baseline=base_name,
                                                   sections=sections)


def _regressions_page(env: jinja2.Environment, out: Path, verdicts: list) -> str:
    flagged = [v for v in verdicts if v.status in ("regression", "suspect", "improvement")]
    flagged.sort(key=lambda v: (("regression", "suspect", "improvement").index(v.status), -abs(v.latest.rel_change)))
    items = []
    for i, v in enumerate(flagged):
        d = v.as_dict()
        if i < MAX_TREND_PLOTS:
            d["svg"] = _write_svg(out, f"trend-{slug(v.case_key + v.device_fingerprint)}.svg", plots.trend_svg(v))
        items.append(d)
    counts = {s: sum(v.status == s for v in verdicts) for s in ("regression", "suspect", "improvement", "ok", "insufficient_data")}
    return env.get_template("regressions.html").render(title="rooflab: regressions", items=items, counts=counts,
                                                       n_series=len(verdicts), max_plots=MAX_TREND_PLOTS)


def write_report(db_url: str, out_dir: str | Path) -> Path:
    """Read every result from the database at `db_url` and write the site; returns index.html."""
    from db.urls import redact
    from reports.breakdown_section import load_layer_profiles
    from reports.load import REPORT_COLUMNS, load_results, load_verdicts

    return render_report(load_results(db_url, REPORT_COLUMNS), out_dir, source=redact(db_url),
                         verdicts=load_verdicts(db_url), layer_profiles=load_layer_profiles(db_url))
