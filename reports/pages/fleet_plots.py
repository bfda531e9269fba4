"""The fleet page's figures as SVG text (reports.pages.plots' style): the heatmap of every device's
deviation wall by wall, rows grouped by node, a flagged device's sparkline over the nights, and the
links page's matrices of pairs."""
from __future__ import annotations

import numpy as np
import seaborn as sns
from matplotlib.patches import Rectangle

from rooflab.reports.fleet.link_records import LinkJudgement, LinkKind, LinksNight
from rooflab.reports.fleet.records import DeviceJudgement, FleetNight, NodeJudgement
from rooflab.reports.fleet.status import FLAGGED, FleetStatus
from rooflab.reports.fleet.walls import WALL_ORDER
from rooflab.reports.pages.plots import _figure, _svg, plain

ROW_INCHES = 0.2  # height of one device's row
STATUS_EDGES = {FleetStatus.SUSPECT: "#e6a100", FleetStatus.SLOW: "#d4572a", FleetStatus.DRAIN: "#8b0000"}


def ordered_devices(night: FleetNight) -> list[tuple[NodeJudgement, list[DeviceJudgement]]]:
    """Nodes as the night lists them (worst first), each with its devices, the worst first."""
    by_host: dict[str, list[DeviceJudgement]] = {}
    for d in night.devices:
        by_host.setdefault(d.host, []).append(d)
    rank = {s: i for i, s in enumerate((FleetStatus.DRAIN, FleetStatus.SLOW, FleetStatus.SUSPECT, FleetStatus.OK,
                                        FleetStatus.NOT_JUDGED))}
    return [(n, sorted(by_host.get(n.host, []), key=lambda d: (rank[d.status], d.device_key))) for n in night.nodes]


def walls_shown(night: FleetNight) -> list[str]:
    """The walls any device of the night was judged on, in the fleet's order."""
    present = {w for d in night.devices for w in d.walls}
    return [w for w in WALL_ORDER if w in present]


def heatmap_svg(night: FleetNight) -> str:
    """Devices (rows, grouped by node, the worst node first) x walls, coloured by deviation from the
    fleet (blue faster, red slower, symmetric about 0); a flagged wall is outlined in its status's
    colour, and a line separates the nodes."""
    groups = ordered_devices(night)
    walls = walls_shown(night)
    devices = [d for _, members in groups for d in members]
    values = np.array([[d.walls[w].deviation_pct if w in d.walls else np.nan for w in walls] for d in devices])
    limit = max(float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0, night.options.drain_pct)
    with _figure(2.2 + 1.1 * max(len(walls), 1), 1.5 + ROW_INCHES * max(len(devices), 1)) as (fig, ax):
        labels = [plain(f"{d.host} {d.device_key}") for d in devices]
        # symmetric limits centre the diverging map on 0 (seaborn's `center` re-maps it through a
        # colormap method matplotlib is deprecating)
        sns.heatmap(values, ax=ax, cmap="RdBu", vmin=-limit, vmax=limit, annot=len(devices) <= 128,
                    fmt=".1f", annot_kws={"fontsize": 6}, xticklabels=walls, yticklabels=labels,
                    cbar_kws={"label": "deviation from the fleet (% of speed)"}, linewidths=0.3, linecolor="white")
        ax.tick_params(axis="y", labelsize=6)
        row = 0
        for _, members in groups[:-1]:
            row += len(members)
            ax.axhline(row, color="black", linewidth=1.0)
        for i, d in enumerate(devices):
            for j, w in enumerate(walls):
                status = d.walls[w].status if w in d.walls else FleetStatus.NOT_JUDGED
                if status in FLAGGED:
                    ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor=STATUS_EDGES[status], linewidth=2))
        ax.set_title(plain(f"{night.night.suite}: night of {night.night.first_run_at:%Y-%m-%d %H:%M}"), fontsize=9)
        return _svg(fig)


def sparkline_svg(device: DeviceJudgement) -> str:
    """A flagged device's deviation night by night (oldest left, tonight right) on its flagged walls,
    with each wall's warn line."""
    flagged = [w for w in device.walls.values() if w.status in FLAGGED and w.trend]
    with _figure(3.2, 1.1) as (fig, ax):
        palette = sns.color_palette("deep", max(len(flagged), 1))
        for color, wall in zip(palette, flagged, strict=False):
            ax.plot(range(len(wall.trend)), [v for _, v in wall.trend], color=color, linewidth=1.2,
                    marker="o", markersize=2, label=plain(wall.wall))
            ax.axhline(-wall.warn_line_pct, color=color, linestyle="--", linewidth=0.7)
        ax.axhline(0.0, color="grey", linewidth=0.5)
        ax.tick_params(labelsize=5)
        ax.set_xticks([])
        ax.set_ylabel("%", fontsize=6)
        if flagged:
            ax.legend(fontsize=5, loc="lower left", frameon=False)
        return _svg(fig)


def link_heatmaps(night: LinksNight) -> dict[str, str]:
    """The matrix of each kind of the night (within nodes; between nodes) as SVG: ends by host, then
    by their label, both ways; each cell a pair's deviation from its siblings' common level (blue
    faster, red slower, symmetric about 0), a flagged pair outlined in its status's colour."""
    out = {}
    for kind in (LinkKind.SAME_NODE, LinkKind.ACROSS_NODES):
        links = [k for k in night.links if k.kind == kind]
        if links:
            out[str(kind)] = _link_heatmap(night, kind, links)
    return out


def _link_heatmap(night: LinksNight, kind: LinkKind, links: list[LinkJudgement]) -> str:
    hosts = {k.a: k.a_host for k in links} | {k.b: k.b_host for k in links}
    ends = sorted(hosts, key=lambda end: (hosts[end], end))
    at = {end: i for i, end in enumerate(ends)}
    values = np.full((len(ends), len(ends)), np.nan)
    for k in links:
        values[at[k.a], at[k.b]] = values[at[k.b], at[k.a]] = k.deviation_pct
    limit = max(float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0, night.options.drain_pct)
    side = 2.0 + 0.3 * len(ends)
    with _figure(side + 1.2, side) as (fig, ax):
        labels = [plain(end if kind == LinkKind.ACROSS_NODES else f"{hosts[end]} {end}") for end in ends]
        sns.heatmap(values, ax=ax, cmap="RdBu", vmin=-limit, vmax=limit, annot=len(ends) <= 16, fmt=".0f",
                    annot_kws={"fontsize": 6}, xticklabels=labels, yticklabels=labels, square=True,
                    cbar_kws={"label": "pair against its siblings (% of speed)"}, linewidths=0.3, linecolor="white")
        ax.tick_params(labelsize=6)
        for k in links:
            if k.status in FLAGGED:
                for i, j in ((at[k.a], at[k.b]), (at[k.b], at[k.a])):
                    ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor=STATUS_EDGES[k.status], linewidth=2))
        what = "pairs of nodes" if kind == LinkKind.ACROSS_NODES else "pairs within nodes"
        ax.set_title(plain(f"{night.night.suite}: {what}, night of {night.night.first_run_at:%Y-%m-%d %H:%M}"),
                     fontsize=9)
        return _svg(fig)
