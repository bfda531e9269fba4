"""Figures as SVG text (matplotlib Agg backend, seaborn styles and palettes).

Every function takes plain frames/records and returns the SVG document as a string; nothing here
reads the database. Text from the database is drawn literally (`plain` escapes mathtext).
"""
from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypedDict

import matplotlib

matplotlib.use("Agg")
# E402: the imports below come after choosing the headless backend, before pyplot can pick another
import matplotlib.pyplot as plt  # noqa: E402 - after matplotlib.use
import numpy as np  # noqa: E402 - after matplotlib.use
import pandas as pd  # noqa: E402 - after matplotlib.use
import seaborn as sns  # noqa: E402 - after matplotlib.use
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402 - after matplotlib.use
from matplotlib.ticker import LogFormatterSciNotation  # noqa: E402 - after matplotlib.use

from rooflab.reports.data.frames import is_cpu, quality_of, usable, with_figure  # noqa: E402 - after matplotlib.use
from rooflab.reports.regressions.gate import Point, SeriesVerdict  # noqa: E402 - after matplotlib.use
from rooflab.reports.regressions.options import Z_THRESHOLD  # noqa: E402 - after matplotlib.use
from rooflab.reports.roofs.gpu_specs import GpuSpec  # noqa: E402 - after matplotlib.use
from rooflab.reports.roofs.models import COLLECTIVE_FAMILY, DeviceCeilings  # noqa: E402 - after matplotlib.use
from rooflab.reports.walls.roofline_rule import attainable_tflops, ridge_flop_per_byte  # noqa: E402 - after matplotlib.use
from rooflab.vocab import HBM_CEILINGS, CacheMode, CeilingKind, Quality, Tool  # noqa: E402 - after matplotlib.use

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

FAMILY_ORDER = ("pointwise", "reduction", "gemm", "attention", "overhead", "probe", "collective")
DTYPE_MARKERS = {"float64": "D", "float32": "o", "tf32": "s", "float16": "^", "bfloat16": "v",
                 "float8_e4m3fn": "P", "float8_e5m2": "X", "int8": "*", "int32": "h"}
_RC: dict[RcKeyType, Any] = {"svg.hashsalt": "rooflab", "svg.fonttype": "path", "figure.dpi": 100, "savefig.dpi": 150}
# Above this many points a chart draws its markers (and the lines through them) as one embedded
# bitmap layer instead of one SVG element each: a year of nightlies is millions of points, which
# as vector markers make a file of hundreds of MB that a browser cannot open. Axes, roofs, labels
# and legends stay vector.
RASTERIZE_ABOVE = 5000


_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
# the labels matplotlib's log formatter writes: $\mathdefault{10^{3}}$, $\mathdefault{2\times10^{4}}$
_MATHTEXT_POWER = re.compile(r"\$\\mathdefault\{(?P<coeff>[0-9.]+\\times)?(?P<base>\d+)\^\{(?P<exp>-?\d+)\}\}\$")


class PowerLabels(LogFormatterSciNotation):
    """A log axis's tick labels (10³, 2×10⁴) as plain text in the font's superscript digits.

    Matplotlib writes them in mathtext, parsed anew for every label of every figure: a roofline and
    a bandwidth figure took 1.37 s of CPU to draw with it, 0.74 s without (median of five, a 2-core
    CPU machine). The ticks and which of them get a label are
    matplotlib's own; a label of another form is kept as matplotlib wrote it."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        label = super().__call__(x, pos)
        match = _MATHTEXT_POWER.fullmatch(label)
        if match is None:
            return label
        coeff = match["coeff"].replace("\\times", "×") if match["coeff"] else ""
        return f"{coeff}{match['base']}{match['exp'].translate(_SUPERSCRIPTS)}"


def log_scale(ax: Any, axes: str, base: float = 10) -> None:
    """A log scale on `axes` ("x", "y" or "xy") of `ax`, its ticks labelled by PowerLabels."""
    for name in axes:
        set_scale, axis = (ax.set_xscale, ax.xaxis) if name == "x" else (ax.set_yscale, ax.yaxis)
        set_scale("log", base=base)
        axis.set_major_formatter(PowerLabels(base))
        axis.set_minor_formatter(PowerLabels(base))


def plain(text: object) -> str:
    """Text from the database as literal text: dollar signs would otherwise start mathtext."""
    return str(text).replace("$", r"\$")


@contextmanager
def _figure(width: float = 8.0, height: float = 5.5) -> Iterator[tuple[plt.Figure, plt.Axes]]:
    with plt.rc_context(_RC), sns.axes_style("whitegrid"):
        fig, ax = plt.subplots(figsize=(width, height))
        try:
            yield fig, ax
        finally:
            plt.close(fig)


def _svg(fig: plt.Figure) -> str:
    """The figure as SVG, cropped to what it draws. The crop is measured on the Agg canvas the
    figure already has (the extents of its parts, nothing drawn) and given to savefig, which
    `bbox_inches="tight"` would instead find by drawing the whole SVG once more: 40 % of the
    report's drawing time. The two crops differ by a few pixels."""
    buf = io.StringIO()
    with plt.rc_context(_RC):
        canvas = fig.canvas
        assert isinstance(canvas, FigureCanvasAgg)  # matplotlib.use("Agg") above
        crop = fig.get_tightbbox(canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])
        fig.savefig(buf, format="svg", bbox_inches=crop, metadata={"Date": None})
    return buf.getvalue()


def _family_colors(families) -> dict[str, tuple]:
    present = set(families)
    names = [f for f in FAMILY_ORDER if f in present] + sorted(present - set(FAMILY_ORDER))
    return dict(zip(names, sns.color_palette("tab10", max(len(names), 1)), strict=False))


def _points(ax: plt.Axes, rows: pd.DataFrame, x: str, y: str) -> None:
    """Scatter coloured by family, marked by dtype; cold filled, hot hollow."""
    colors = _family_colors(rows["family"].astype(str))
    raster = len(rows) > RASTERIZE_ABOVE
    for (family, dtype, cache), g in rows.groupby(["family", "dtype", "cache"], sort=True):
        color = colors[str(family)]
        marker = DTYPE_MARKERS.get(str(dtype), "o")
        face = color if cache == CacheMode.COLD else "none"
        ax.scatter(g[x], g[y], marker=marker, s=36, facecolors=face, edgecolors=[color], linewidths=1.2,
                   label=plain(f"{family} {dtype} {cache}"), zorder=3, rasterized=raster)


# --- the roofline chart ---

POINT_COLUMNS = ("point", "case_key", "run_id", "quality", "median_ms", "p10_ms", "p90_ms", "rel_ci_halfwidth",
                 "n_samples", "stop_reason", "intensity", "tflops", "cpu_threads", "quality_reasons", "tool")
IMPORTED_MARK: dict[str, Any] = {"marker": "s", "s": 110, "facecolors": "none", "linewidths": 1.0, "zorder": 2}
class _Mark(TypedDict):
    marker: str
    s: float
    color: str
    linewidths: float
    zorder: int


UNTRUSTED_MARK: _Mark = {"marker": "x", "s": 14, "color": "black", "linewidths": 0.9, "zorder": 4}
TOOL_COLORS = ("tab:red", "tab:olive", "tab:cyan", "tab:pink")  # the rings of imported points, one per peer


def roofline_points(rows: pd.DataFrame) -> pd.DataFrame:
    """The points of the roofline chart, numbered (`point`: the anchor `pt-N` the chart links to):
    every ok result with FLOPs and bytes except the `launch` probe, with intensity, TFLOP/s and
    quality (reports.data.frames.quality_of)."""
    ok = with_figure(rows)
    if not ok.empty:
        ok = ok[ok["op"] != "launch"]  # the launch probe's nominal FLOPs say nothing: it sets the launch floor
        ok = ok[ok["family"] != COLLECTIVE_FAMILY]  # bus bytes are not DRAM traffic: the interconnect section
    if ok.empty:
        return pd.DataFrame(columns=list(POINT_COLUMNS) + ["x", "y", "family", "dtype", "cache", "op"])
    pts = ok[(pd.to_numeric(ok["flops"], errors="coerce") > 0)
             & (pd.to_numeric(ok["bytes"], errors="coerce") > 0)].copy()
    pts = pts.sort_values([c for c in ("family", "op", "case_key", "run_id") if c in pts.columns], kind="stable")
    pts["x"] = pts["flops"].astype(float) / pts["bytes"].astype(float)
    pts["y"] = pts["tflops"].astype(float)  # as stored (db/measurement_columns.py derives it once)
    pts["intensity"] = pts["x"]
    pts["quality"] = quality_of(pts)
    pts["point"] = range(1, len(pts) + 1)
    for col in POINT_COLUMNS:
        if col not in pts.columns:
            pts[col] = None
    pts["tool"] = pts["tool"].astype(object).where(pts["tool"].notna(), str(Tool.ROOFLAB))
    return pts.reset_index(drop=True)


def imported_tools(pts: pd.DataFrame) -> list[str]:
    """The peers whose imported results are among `pts` (rooflab's own are not marked)."""
    return sorted(str(t) for t in pts["tool"].unique() if t != Tool.ROOFLAB) if "tool" in pts.columns else []


def _point_title(r: pd.Series) -> str:
    ci = r.get("rel_ci_halfwidth")
    ci_text = f" +/- {100 * float(ci):.1f} %" if ci is not None and ci == ci else ""
    tool = r.get("tool")
    lines = [str(r["case_key"]), f"run {r['run_id']}" + (f" (imported from {tool})" if tool not in (None, Tool.ROOFLAB)
                                                          else ""),
             f"{float(r['median_ms']):.4g} ms{ci_text} (CI95 of the median), stopped: {r.get('stop_reason') or '?'}",
             f"{float(r['x']):.3g} FLOP/byte, {float(r['y']):.4g} TFLOP/s"]
    if r["quality"] != Quality.GOOD:
        lines.append(f"{r['quality']}: never sets a roof")
    return "\n".join(lines)


def _bandwidth_label(kind: CeilingKind, llc: bool) -> str:
    return {CeilingKind.HBM_RW: "DRAM" if llc else "HBM", CeilingKind.HBM_RO: "DRAM read" if llc else "HBM read",
            CeilingKind.HBM_WO: "DRAM write" if llc else "HBM write", CeilingKind.L2: "LLC" if llc else "L2"}[kind]


def roofline_svg(rows: pd.DataFrame, dc: DeviceCeilings, *, inline: bool = False) -> str:
    """Log-log roofline: intensity (FLOP/byte) against achieved TFLOP/s.

    Measured roofs solid, datasheet roofs dashed, every roof labelled on the chart (a raised roof
    says so); the fma_intensity sweep as the measured knee (a line per dtype); every point of
    `roofline_points` drawn coloured by family, marked by dtype, filled cold and hollow hot, with a
    black x over noisy and contended ones. Below RASTERIZE_ABOVE points each point carries a
    `<title>` (hover) and links to `#pt-N`, its row in the page's point table. A CPU's last-level
    cache is called LLC and its memory DRAM. `inline`: without the XML prologue, to embed in HTML.
    The roofs are drawn by the roofline rule (reports/walls/roofline_rule.py: the attainable rate
    and the ridge point).
    """
    pts = roofline_points(rows)
    titles: dict[str, list[tuple[int, str]]] = {}
    with _figure(9.0, 6.0) as (fig, ax):
        log_scale(ax, "xy")
        xs = [1 / 64, 4096.0]
        if not pts.empty:
            xs = [min(xs[0], pts["x"].min() / 2), max(xs[1], pts["x"].max() * 2)]
        grid = np.logspace(math.log10(xs[0]), math.log10(xs[1]), 200)
        top = _compute_top(dc, pts)
        _draw_bandwidth_roofs(ax, dc, grid, top, is_cpu(rows))
        _draw_compute_roofs(ax, dc, xs)
        if dc.spec is not None:
            _draw_datasheet_roofs(ax, dc.spec, pts, grid, xs, top)
        knee = pts[pts["op"] == "fma_intensity"] if not pts.empty else pts
        for _dtype, g in knee.groupby("dtype") if not knee.empty else ():
            g = g.sort_values("x")
            ax.plot(g["x"], g["y"], "-", color="tab:purple", lw=1.0, alpha=0.8, rasterized=len(g) > RASTERIZE_ABOVE)
        handles = _draw_roofline_points(ax, pts, titles) if not pts.empty else []
        if not knee.empty:
            handles.append(_line_handle(color="tab:purple", label="fma_intensity knee"))
        if dc.ceilings:
            handles.append(_line_handle(color="black", label="measured roof"))
        if dc.spec is not None:
            handles.append(_line_handle(color="black", ls="--", alpha=0.7, label=f"datasheet ({dc.spec.key})"))
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.set_title(f"Roofline: {plain(dc.device_name)}", fontsize=10)
        if handles:
            ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        if pts.empty and not dc.ceilings:
            ax.text(0.5, 0.5, "no measurements", transform=ax.transAxes, ha="center")
        svg = _svg(fig)
    svg = add_point_titles(svg, titles)
    return _inline(svg) if inline else svg


def _line_handle(**style: Any) -> Any:
    """A legend entry drawn as a line or a marker (matplotlib.lines.Line2D)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], **style)


def _compute_ceilings(dc: DeviceCeilings) -> list:
    return [c for c in dc.ceilings if c.kind in (CeilingKind.VECTOR, CeilingKind.MATRIX)]


def _compute_top(dc: DeviceCeilings, pts: pd.DataFrame) -> float:
    """The highest measured compute roof: where the bandwidth roofs stop rising (twice the best
    point without one)."""
    compute = _compute_ceilings(dc)
    if compute:
        return max(c.value for c in compute)
    if not pts.empty:
        return float(pts["y"].max()) * 2
    return 1.0


def _draw_bandwidth_roofs(ax: plt.Axes, dc: DeviceCeilings, grid: np.ndarray, top: float, llc: bool) -> None:
    """The measured HBM (read-write, read-only and write-only) and L2 roofs, each rising to `top`,
    labelled (the labels of the three memory roofs set apart along the line)."""
    for c in dc.ceilings:
        if c.kind in (*HBM_CEILINGS, CeilingKind.L2):
            roof_color = {CeilingKind.HBM_RW: "black", CeilingKind.HBM_RO: "dimgray", CeilingKind.HBM_WO: "tab:olive",
                          CeilingKind.L2: "tab:brown"}[c.kind]
            ax.plot(grid, attainable_tflops(grid, top, c.value), "-", lw=1.6, color=roof_color, zorder=2)
            x0 = grid[{CeilingKind.HBM_RO: 12, CeilingKind.HBM_WO: 21}.get(c.kind, 3)]
            raised = " (raised by a result)" if c.raised else ""
            ax.annotate(f"{_bandwidth_label(c.kind, llc)} {c.value:,.4g} GB/s{raised}",
                        (x0, attainable_tflops(x0, math.inf, c.value)),
                        fontsize=8, color=roof_color, rotation=0, ha="left", va="bottom",
                        xytext=(0, 3), textcoords="offset points")


def _draw_compute_roofs(ax: plt.Axes, dc: DeviceCeilings, xs: list[float]) -> None:
    """The measured matrix (reds) and vector (blues) roofs, from the HBM ridge point on, labelled."""
    compute = _compute_ceilings(dc)
    hbm = dc.get(CeilingKind.HBM_RW) or dc.get(CeilingKind.HBM_RO)
    shades = {kind: iter(sns.color_palette("Reds_d" if kind == CeilingKind.MATRIX else "Blues_d",
                                           max(1, sum(c.kind == kind for c in compute))))
              for kind in (CeilingKind.MATRIX, CeilingKind.VECTOR)}
    for c in compute:
        start = ridge_flop_per_byte(c.value, hbm.value) if hbm else xs[0]
        color = next(shades[c.kind])
        ax.hlines(c.value, start, xs[1], colors=[color], lw=1.4, zorder=2)
        raised = " (raised by a result)" if c.raised else ""
        ax.annotate(plain(f"{c.kind} {c.dtype} {c.value:.3g} TFLOP/s{raised}"), (xs[1], c.value), fontsize=8,
                    ha="right", va="bottom", color=color)


def _draw_datasheet_roofs(ax: plt.Axes, spec: GpuSpec, pts: pd.DataFrame, grid: np.ndarray, xs: list[float],
                          top: float) -> None:
    """The datasheet's HBM roof and its peaks of the dtypes drawn, dashed and grey."""
    bw = spec.memory_gbps.value
    dtypes = set(pts["dtype"]) if not pts.empty else set()
    peaks = {}
    for dtype in sorted(dtypes):
        for matrix in (True, False):
            fig_ = spec.peak_tflops(dtype, matrix=matrix)
            if fig_ is not None:
                peaks[f"{'matrix' if matrix else 'vector'} {dtype}"] = fig_.value
    dtop = max(list(peaks.values()) + [top])
    ax.plot(grid, attainable_tflops(grid, dtop, bw), "--", color="black", lw=1.0, alpha=0.7)
    ax.annotate(f"datasheet HBM {bw:,.0f} GB/s", (grid[40], attainable_tflops(grid[40], math.inf, bw)), fontsize=7,
                color="gray", ha="left", va="top", xytext=(4, -2), textcoords="offset points")
    for label, value in peaks.items():
        ax.hlines(value, ridge_flop_per_byte(value, bw), xs[1], linestyles="dashed", colors="gray", lw=0.9)
        ax.annotate(f"datasheet {label} {value:.3g}", (xs[1], value), fontsize=7, ha="right", va="top",
                    color="gray")


def _draw_roofline_points(ax: plt.Axes, pts: pd.DataFrame, titles: dict[str, list[tuple[int, str]]]) -> list:
    """The points by family, dtype and cache (each group's `<title>`s into `titles` when they are
    drawn as vectors), a black x over the untrusted ones; the legend entries that explain them."""
    raster = len(pts) > RASTERIZE_ABOVE
    colors = _family_colors(pts["family"].astype(str))
    for k, ((family, dtype, cache), g) in enumerate(pts.groupby(["family", "dtype", "cache"], sort=True)):
        color = colors[str(family)]
        gid = f"rl-points-{k}"
        ax.scatter(g["x"], g["y"], marker=DTYPE_MARKERS.get(str(dtype), "o"), s=36,
                   facecolors=color if cache == CacheMode.COLD else "none", edgecolors=[color], linewidths=1.2,
                   zorder=3, rasterized=raster, gid=gid)
        if not raster:
            titles[gid] = [(int(r["point"]), _point_title(r)) for _, r in g.iterrows()]
    bad = pts[pts["quality"] != Quality.GOOD]
    if not bad.empty:
        ax.scatter(bad["x"], bad["y"], rasterized=raster, **UNTRUSTED_MARK)
    handles: list = []
    for tool, ring in zip(imported_tools(pts), TOOL_COLORS, strict=False):
        mine = pts[pts["tool"] == tool]
        ax.scatter(mine["x"], mine["y"], edgecolors=[ring], rasterized=raster, **IMPORTED_MARK)
        handles.append(_line_handle(ls="", marker="s", markersize=9, color=ring, markerfacecolor="none",
                                    label=plain(f"imported: {tool}")))
    handles += [_line_handle(ls="", marker="o", color=color, label=plain(family)) for family, color in colors.items()]
    for dtype in sorted(pts["dtype"].astype(str).unique()):
        handles.append(_line_handle(ls="", marker=DTYPE_MARKERS.get(dtype, "o"), color="gray",
                                    markerfacecolor="none", label=plain(dtype)))
    handles.append(_line_handle(ls="", marker="o", color="gray", label="filled: cold cache"))
    handles.append(_line_handle(ls="", marker="o", color="gray", markerfacecolor="none", label="hollow: hot cache"))
    if not bad.empty:
        handles.append(_line_handle(ls="", marker="x", color="black", label="noisy or contended"))
    return handles


def _inline(svg: str) -> str:
    """The SVG element alone, for an HTML page: no XML prologue, metadata or namespace URLs (the
    HTML parser knows svg and xlink:href by itself)."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.DOTALL)
    return re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg, count=2)


def add_point_titles(svg: str, titles: dict[str, list[tuple[int, str]]]) -> str:
    """Give each marker of the scatter groups `titles` names (gid -> [(point number, text)] in
    drawing order) a <title> and a link to `#pt-N`; a group whose marker count differs is left alone."""
    for gid, entries in titles.items():
        start = svg.find(f'<g id="{gid}"')
        if start < 0:
            continue
        end = svg.find("</g>", start)
        block = svg[start:end]
        uses = list(re.finditer(r"<use [^>]*?/>", block))
        if len(uses) != len(entries):
            continue
        parts, last = [], 0
        for m, (number, text) in zip(uses, entries, strict=True):
            parts.append(block[last:m.start()])
            parts.append(f'<a href="#pt-{number}">{m.group(0)[:-2]}><title>{html.escape(text)}</title></use></a>')
            last = m.end()
        parts.append(block[last:])
        svg = svg[:start] + "".join(parts) + svg[end:]
    return svg


def bandwidth_svg(rows: pd.DataFrame, l2_bytes: int, device_name: str) -> str:
    """Achieved GB/s against working set (bytes, log x) for zero-FLOP ops and the stream probes."""
    ok = usable(rows)
    ok = ok[ok["family"] != COLLECTIVE_FAMILY] if not ok.empty else ok  # charted in the interconnect section
    sel = (ok[(pd.to_numeric(ok["flops"], errors="coerce") == 0) | ok["op"].astype(str).str.startswith("stream_")]
           if not ok.empty else ok)
    sel = sel[pd.to_numeric(sel["bytes"], errors="coerce") > 0] if not sel.empty else sel
    with _figure(8.0, 4.5) as (fig, ax):
        log_scale(ax, "x")
        if not sel.empty:
            sel = sel.assign(gbps_=sel["gbps"].astype(float))  # as stored
            ops = sorted(sel["op"].astype(str).unique())
            colors = dict(zip(ops, sns.color_palette("tab10", len(ops)), strict=True))
            raster = len(sel) > RASTERIZE_ABOVE
            for (op, cache), g in sel.groupby(["op", "cache"], sort=True):
                g = g.sort_values("bytes")
                c = colors[str(op)]
                ax.plot(g["bytes"].astype(float), g["gbps_"], "-" if cache == CacheMode.COLD else ":", color=c, lw=1.0,
                        rasterized=raster)
                face = c if cache == CacheMode.COLD else "none"
                ax.scatter(g["bytes"].astype(float), g["gbps_"], color=c, facecolors=face,
                           edgecolors=[c], s=28, label=plain(f"{op} {cache}"), zorder=3, rasterized=raster)
        else:
            ax.text(0.5, 0.5, "no zero-FLOP or stream measurements", transform=ax.transAxes, ha="center")
        if l2_bytes:
            ax.axvline(l2_bytes, color="tab:brown", ls="--", lw=1.0, label=f"L2 = {l2_bytes / 2**20:.0f} MiB")
            ax.axvline(4 * l2_bytes, color="tab:brown", ls=":", lw=0.8, label="4 x L2")
        ax.set_xlabel("working set (bytes moved per call)")
        ax.set_ylabel("achieved GB/s")
        ax.set_title(f"Bandwidth against working set: {plain(device_name)} (filled = cold, hollow = hot)", fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return _svg(fig)


def _run_axis(points: tuple[Point, ...]) -> tuple[list[Any], str]:
    """x positions of a series' points: their run dates when every point has one, else run order."""
    if points and all(p.started_at for p in points):
        return list(pd.to_datetime([p.started_at for p in points], utc=True).tz_localize(None)), "run date (UTC)"
    return list(range(len(points))), "run (in run order)"


def trend_svg(verdict: SeriesVerdict, z_threshold: float = Z_THRESHOLD) -> str:
    """Per-run medians of one series over its run dates: baseline band, excluded points hollow,
    segments separated, change points and a drift window marked, the first bad run named."""
    with _figure(8.0, 3.2) as (fig, ax):
        pts = verdict.points
        x, xlabel = _run_axis(pts)
        at = {p.run_id: x[i] for i, p in enumerate(pts)}
        y = [p.median_ms for p in pts]
        ax.plot(x, y, "-", color="lightgray", lw=0.8)
        good = [(x[i], p.median_ms) for i, p in enumerate(pts) if p.good]
        bad = [(x[i], p.median_ms) for i, p in enumerate(pts) if not p.good]
        if good:
            good_x, good_y = zip(*good, strict=True)
            ax.scatter(good_x, good_y, color="tab:blue", s=18, label="good", zorder=3)
        if bad:
            bad_x, bad_y = zip(*bad, strict=True)
            ax.scatter(bad_x, bad_y, facecolors="none", edgecolors="tab:orange", s=24, label="kept out of baseline",
                       zorder=3)
        env_label = "environment change"
        for i in range(1, len(pts)):
            if pts[i].segment != pts[i - 1].segment:
                ax.axvline(x[i], color="tab:green", ls="--", lw=1.0, label=env_label)
                env_label = "_"
        if verdict.baseline is not None:
            b = verdict.baseline
            ax.axhline(b.center_ms, color="black", lw=0.8, label="baseline median")
            ax.axhspan(b.center_ms - z_threshold * b.spread_ms, b.center_ms + z_threshold * b.spread_ms,
                       color="tab:blue", alpha=0.08, label=f"+/- {z_threshold:g} baseline sd")
        if verdict.drift is not None and verdict.drift.first_run in at:
            ax.axvspan(at[verdict.drift.first_run], x[-1], color="tab:purple", alpha=0.10,
                       label=f"drift window ({100 * verdict.drift.rel_change:+.1f} %)")
        labels = {"slower": "change point, slower", "faster": "change point, faster"}
        for c in verdict.change_points:
            if c.run_id in at:
                slower = c.direction == "slower"
                ax.axvline(at[c.run_id], color="tab:red" if slower else "tab:green", ls="-." if slower else ":", lw=1.2,
                           label=labels.pop(c.direction, "_"))
        flagged = [f for f in (verdict.previous, verdict.latest) if f is not None and f.flagged]
        flag_label = "newest runs, flagged"
        for f in flagged:
            if f.run_id in at:
                ax.scatter([at[f.run_id]], [f.median_ms], color="tab:red", s=50, marker="D", zorder=4, label=flag_label)
                flag_label = "_"
        if verdict.first_bad is not None and verdict.first_bad.run_id in at:
            fb = verdict.first_bad
            ax.scatter([at[fb.run_id]], [fb.median_ms], facecolors="none", edgecolors="black", s=110, marker="o",
                       linewidths=1.4, zorder=5,
                       label=plain(f"first bad run {fb.run_id} ({fb.git_commit or 'no commit'})"))
        if xlabel.startswith("run date"):
            fig.autofmt_xdate()
        ax.set_xlabel(xlabel)
        ax.set_ylabel("median ms")
        ax.set_title(plain(f"{verdict.status}{' + drift' if verdict.drift else ''}: "
                           f"{verdict.case_key} on {verdict.device_name}"),
                     fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return _svg(fig)
