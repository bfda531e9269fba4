"""The cross-check page of the report: per device, the ratio table and a plot of the ratios against
the kernel's duration (where timers disagree is small kernels): rooflab in the peer's mode / peer
(the engines' agreement, on which a disagreement is judged) and, faint, rooflab as configured /
peer (the method difference, named in the table by the modes that differ).

Reads nothing itself: `crosscheck_page` takes the frame `db.crosscheck.crosscheck_frame` gives;
only the newest cross-check run of each device is shown.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pandas as pd

from rooflab.db.crosscheck import summarize_groups
from rooflab.reports.pages import plots
from rooflab.vocab import ResultStatus

REASON_TEXT = {
    "contended": "the machine was contended",
    "cold_vs_hot": "cold against hot",
    "mean_vs_median": "peer averages calls; rooflab's calls are skewed",
    "host_time": "host time inside the peer's number",
    "launch_overhead": "launch overhead (short kernel, stream not held)",
}
PEER_MARKERS = {"torch": "o", "do_bench": "s", "nvbench": "^", "cupyx": "D"}


def newest_per_device(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of each device's newest cross-check run (by measured_at)."""
    if frame.empty:
        return frame
    last = frame.groupby(["device_name", "run_id"], sort=False)["measured_at"].max().reset_index()
    newest = last.sort_values("measured_at").groupby("device_name").tail(1)
    keep = set(zip(newest["device_name"], newest["run_id"], strict=True))
    return frame[[(d, r) in keep for d, r in zip(frame["device_name"], frame["run_id"], strict=True)]]


def judged_ratio(rows: pd.DataFrame) -> pd.Series:
    """The ratio a row's verdict was judged on: in the peer's mode (revision 0009 on), else as configured."""
    in_mode = pd.to_numeric(rows.get("in_mode_ratio", pd.Series(index=rows.index, dtype=float)), errors="coerce")
    return in_mode.fillna(pd.to_numeric(rows["ratio"], errors="coerce"))


def ratio_svg(rows: pd.DataFrame, device: str) -> str:
    """The judged ratio (log) against rooflab's median (log), one marker per peer, disagreements filled
    red; the ratio as configured (the method difference) in grey where it differs."""
    import matplotlib.ticker as mticker

    ok = rows[(rows["status"] == ResultStatus.OK) & rows["ratio"].notna()]
    with plots._figure(8.0, 4.5) as (fig, ax):
        judged = judged_ratio(ok)
        has_mode = judged.ne(pd.to_numeric(ok["ratio"], errors="coerce"))
        if has_mode.any():
            ax.scatter(ok["rooflab_median_ms"][has_mode], ok["ratio"][has_mode], marker="x", color="0.6",
                       label="as configured / peer (method difference)")
        for peer, group in ok.groupby("peer", sort=True):
            marker = PEER_MARKERS.get(str(peer), "o")
            agree = group[~group["disagrees"].astype(bool)]
            differ = group[group["disagrees"].astype(bool)]
            ax.scatter(agree["rooflab_median_ms"], judged[agree.index], marker=marker, facecolors="none",
                       edgecolors="tab:blue", label=f"{plots.plain(peer)} agrees (in its mode)")
            if not differ.empty:
                ax.scatter(differ["rooflab_median_ms"], judged[differ.index], marker=marker, color="tab:red",
                           label=f"{plots.plain(peer)} disagrees (in its mode)")
        ax.axhline(1.0, color="grey", linewidth=1)
        plots.log_scale(ax, "xy")
        ax.yaxis.set_major_formatter(mticker.ScalarFormatter())
        ax.set_xlabel("rooflab median per call (ms)")
        ax.set_ylabel("ratio rooflab / peer")
        ax.set_title(plots.plain(f"cross-check on {device}"))
        if not ok.empty:
            ax.legend(loc="best", fontsize="small")
        return plots._svg(fig)


def _number(value: Any) -> float | None:
    return None if value is None or value != value else float(value)


def summary(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Per peer and family, sorted; the rule is db.crosscheck.summarize_groups (contended rows
    counted, but left out of the geometric mean and the worst case)."""
    groups = summarize_groups(rows.sort_values(["peer", "family"]).itertuples(index=False), with_all=False)
    return [asdict(g) for g in groups]


def crosscheck_page(env: Any, write_svg: Callable[[str, str], str], frame: pd.DataFrame,
                    slug: Callable[[str], str]) -> str:
    """The HTML of crosscheck.html; `write_svg(name, svg)` stores a figure and returns its path."""
    shown = newest_per_device(frame)
    sections = []
    for device, rows in shown.groupby("device_name", sort=True):
        rows = rows.sort_values(["family", "case_key", "peer"])
        skipped = rows[rows["status"] == ResultStatus.SKIPPED].drop_duplicates("peer")
        records = []
        for r in rows[rows["status"] != ResultStatus.SKIPPED].itertuples(index=False):
            records.append({
                "case_key": r.case_key, "peer": r.peer, "status": r.status, "error": r.error,
                "mode": f"{r.peer_cache or ''} {r.peer_clock or ''}".strip(), "cache": r.cache,
                "rooflab_median_ms": r.rooflab_median_ms, "rooflab_spread": r.rooflab_spread,
                "peer_median_ms": r.peer_median_ms, "peer_spread": r.peer_spread, "ratio": r.ratio,
                "disagrees": bool(r.disagrees), "reason": REASON_TEXT.get(r.likely_reason or "", r.likely_reason),
                "contended": bool(r.contended), "contention": "; ".join(r.contention_reasons or ()),
                "peer_mode": getattr(r, "peer_mode", None), "rooflab_mode": getattr(r, "rooflab_mode", None),
                "differences": "; ".join(getattr(r, "method_differences", None) or ()),
                "in_mode_median_ms": getattr(r, "in_mode_median_ms", None),
                "in_mode_ratio": _number(getattr(r, "in_mode_ratio", None)),
            })
        sections.append({
            "device": device, "run_id": rows["run_id"].iloc[0], "rows": records, "summary": summary(rows),
            "skipped": [{"peer": s.peer, "error": s.error} for s in skipped.itertuples(index=False)],
            "versions": sorted({f"{p} {v}" for p, v in zip(rows["peer"], rows["peer_version"], strict=True) if v}),
            "svg": write_svg(f"crosscheck-{slug(str(device))}.svg", ratio_svg(rows, str(device))),
        })
    return env.get_template("crosscheck.html").render(title="rooflab: cross-check", sections=sections)
