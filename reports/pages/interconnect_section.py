"""The device page's interconnect section: the collectives of the shown runs.

- the chart: bus bandwidth (nccl-tests' busbw, the stored `gbps`) against the bytes each rank sends,
  a line per collective, world size, dtype and mode (the bandwidth-against-working-set chart's
  twin; rooflab's stream solid, its isolated dotted), and per tool that measured it and half (an
  import's lines are dashed and named by the tool),
  with the datasheet's NVLink and PCIe figures per direction dashed;
- the interconnect ceilings (best busbw) and latency floors (fastest median) per collective and
  world size, beside the datasheet link (reports.roofs.ceilings, reports/roofs/interconnect.py);
- the stragglers: for each collective result, its slowest rank and how much slower that rank's own
  median is than the others' (db.collectives.collective_frame), largest first; and the NCCL
  versions and NCCL_* settings the shown runs ran with.
"""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from matplotlib.ticker import FuncFormatter

from rooflab.reports.pages import plots
from rooflab.reports.roofs.interconnect import curves
from rooflab.reports.roofs.models import DeviceCeilings
from rooflab.reports.walls.roofline_rule import OVERHEAD_FACTOR
from rooflab.suite.ops.base import format_bytes
from rooflab.vocab import CeilingKind, CollectiveMode, Quality, ResultStatus, Tool

STRAGGLERS_SHOWN = 15


def interconnect_svg(points: pd.DataFrame, dc: DeviceCeilings) -> str:
    """busbw against bytes per rank (log-log), a line per collective, world size and dtype."""
    with plots._figure(8.0, 4.5) as (fig, ax):
        plots.log_scale(ax, "x", base=2)
        plots.log_scale(ax, "y")
        groups = (list(points.groupby(["op", "ranks", "dtype", "mode", "line", "tool"], sort=True))
                  if not points.empty else [])
        colors = dict(zip(sorted(points["op"].unique()) if not points.empty else [],
                          plots.sns.color_palette("tab10", 10), strict=False))
        for (op, ranks, dtype, mode, line, tool), g in groups:
            isolated = mode == CollectiveMode.ISOLATED
            style = ":" if isolated else "-" if tool == Tool.ROOFLAB else "--"
            ax.plot(g["bytes_per_rank"], g["gbps"], style, color=colors[op], lw=1.0,
                    marker=plots.DTYPE_MARKERS.get(str(dtype), "o"), ms=4,
                    label=plots.plain(f"{op} x{ranks} {dtype}{line}" + (" isolated" if isolated else "")))
        bad = points[points["quality"] != Quality.GOOD] if not points.empty else points
        if not bad.empty:
            ax.scatter(bad["bytes_per_rank"], bad["gbps"], label="noisy or contended", **plots.UNTRUSTED_MARK)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v).replace(".00", "")))
        links = (("NVLink", dc.spec.nvlink_gbps), ("PCIe", dc.spec.pcie_gbps)) if dc.spec is not None else ()
        for name, link in links:
            if link is not None:
                ax.axhline(link.value, color="gray", ls="--", lw=0.9,
                           label=plots.plain(f"datasheet {name} {link.value:g} GB/s per direction"))
        if not groups:
            ax.text(0.5, 0.5, "no collective measurements", transform=ax.transAxes, ha="center")
        ax.set_xlabel("bytes per rank (n x element size)")
        ax.set_ylabel("bus bandwidth (busbw), GB/s")
        ax.set_title(plots.plain(f"Collectives: {dc.device_name}"), fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return plots._svg(fig)


def _stragglers(groups: pd.DataFrame | None, rows: pd.DataFrame) -> list[dict]:
    if groups is None or groups.empty or rows.empty:
        return []
    mine = groups[groups["device_fingerprint"].isin(set(rows["device_fingerprint"]))
                  & groups["run_id"].isin(set(rows["run_id"])) & (groups["status"] == ResultStatus.OK)]
    mine = mine[mine["straggler_excess"].notna()].sort_values("straggler_excess", ascending=False)
    out = []
    for _, g in mine.head(STRAGGLERS_SHOWN).iterrows():
        medians, slowest = list(g["rank_medians_ms"]), int(g["slowest_rank"])
        devices = list(g["rank_devices"])
        out.append({"case_key": g["case_key"], "run_id": g["run_id"], "ranks": g["ranks"], "slowest_rank": slowest,
                    "slowest_ms": medians[slowest], "fastest_ms": min(medians), "excess": g["straggler_excess"],
                    "where": devices[slowest] if slowest < len(devices) else ""})
    return out


def _libraries(groups: pd.DataFrame | None, rows: pd.DataFrame) -> list[dict]:
    if groups is None or groups.empty or rows.empty:
        return []
    mine = groups[groups["run_id"].isin(set(rows["run_id"]))
                  & groups["device_fingerprint"].isin(set(rows["device_fingerprint"]))]
    seen: dict[tuple, dict] = {}
    for _, g in mine.iterrows():
        settings = ", ".join(f"{k}={v}" for k, v in sorted(dict(g["comm_settings"]).items()))
        key = (g["backend"], g["comm_version"], settings)
        seen.setdefault(key, {"backend": g["backend"], "version": g["comm_version"], "settings": settings,
                              "results": 0})["results"] += 1
    return list(seen.values())


def section(rows: pd.DataFrame, dc: DeviceCeilings, groups: pd.DataFrame | None,
            write_svg: Callable[[str, str], str], slug: str) -> dict | None:
    """The template context of one device's interconnect section, or None without collectives."""
    points = curves(rows)
    if points.empty:
        return None
    ceilings = {(c.collective, c.ranks): c for c in dc.ceilings if c.kind == CeilingKind.INTERCONNECT}
    floors = {(c.collective, c.ranks): c for c in dc.ceilings if c.kind == CeilingKind.COMM_LATENCY}
    link = dc.spec.interconnect_gbps if dc.spec is not None else None
    roofs = []
    for key in sorted(set(ceilings) | set(floors), key=lambda k: (str(k[0]), k[1] or 0)):
        c, f = ceilings.get(key), floors.get(key)
        roofs.append({"collective": key[0], "ranks": key[1], "busbw": c.value if c else None,
                      "case_key": c.case_key if c else None, "latency_ms": f.value if f else None,
                      "latency_case": f.case_key if f else None, "datasheet": link.value if link else None,
                      "ratio": c.value / link.value if (c and link) else None})
    return {
        "svg": write_svg(f"interconnect-{slug}.svg", interconnect_svg(points, dc)),
        "roofs": roofs,
        "overhead_factor": OVERHEAD_FACTOR,  # the roofline rule's, which the page's note names
        "link_source": link.source if link else None,
        "stragglers": _stragglers(groups, rows),
        "libraries": _libraries(groups, rows),
        "points": points.to_dict("records"),
    }
