"""The comparison's figures as SVG text: every case's speedup with its 95 % interval against its
intensity, and the geometric means by family and dtype with theirs (reports.pages.plots' style)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.ticker import ScalarFormatter

from rooflab.reports.pages.plots import _family_colors, _figure, _svg, log_scale, plain

UNJUDGED_ALPHA = 0.35  # untrusted and not comparable cases are drawn faint


def _interval_errors(rows: pd.DataFrame, value: str, low: str, high: str) -> tuple[list[float], list[float]]:
    """matplotlib's asymmetric error bars (below, above) from interval columns (0 without one)."""
    below, above = [], []
    for v, lo, hi in zip(rows[value], rows[low], rows[high], strict=True):
        ok = lo is not None and hi is not None and lo == lo and hi == hi
        below.append(max(0.0, float(v) - float(lo)) if ok else 0.0)
        above.append(max(0.0, float(hi) - float(v)) if ok else 0.0)
    return below, above


def _bars(ax, rows: pd.DataFrame, value: str, low: str, high: str, color, alpha: float, lw: float) -> None:
    """Vertical interval bars (one collection) from interval columns; rows without one get none."""
    below, above = (np.asarray(e) for e in _interval_errors(rows, value, low, high))
    v = rows[value].astype(float).to_numpy()
    keep = [b > 0 or a > 0 for b, a in zip(below, above, strict=True)]
    if any(keep):
        x = rows["x"].to_numpy()[keep]
        ax.vlines(x, (v - below)[keep], (v + above)[keep], colors=[color], linewidths=lw, alpha=alpha, zorder=2)


def speedup_svg(cmp: pd.DataFrame, baseline: str, candidate: str) -> str:
    """Measured speedup against intensity, each with its 95 % interval (a vertical bar), and the
    predicted speedup (x, with the launch floors' range as a bar for overhead-bound cases)."""
    with _figure(8.0, 4.5) as (fig, ax):
        rows = cmp[cmp["speedup"].notna()] if not cmp.empty else cmp
        if not rows.empty:
            rows = rows.assign(x=rows["intensity"].astype(float).fillna(0).clip(lower=1e-3))
            colors = _family_colors(rows["family"].astype(str))
            judged = rows["speedup_low"].notna() | rows["standing"].isin(["no_interval"])
            for family, g in rows.groupby("family", sort=True):
                col = colors[str(family)]
                for faint, part in ((False, g[judged[g.index]]), (True, g[~judged[g.index]])):
                    if part.empty:
                        continue
                    alpha = UNJUDGED_ALPHA if faint else 1.0
                    _bars(ax, part, "speedup", "speedup_low", "speedup_high", col, alpha, 1.0)
                    ax.scatter(part["x"], part["speedup"], s=16, color=col, alpha=alpha, zorder=3,
                               label=plain(f"{family} measured (95 % interval)" if not faint
                                           else f"{family} untrusted or not comparable"))
                pred = g[g["predicted_speedup"].notna()]
                if not pred.empty:
                    _bars(ax, pred, "predicted_speedup", "predicted_low", "predicted_high", col, 0.6, 0.8)
                    ax.scatter(pred["x"], pred["predicted_speedup"], marker="x", s=20, color=col, alpha=0.8,
                               label=plain(f"{family} predicted"))
            log_scale(ax, "xy")
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(ScalarFormatter())
        else:
            ax.text(0.5, 0.5, "no case ok on both sides", transform=ax.transAxes, ha="center")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xlabel("arithmetic intensity (FLOP/byte; zero-FLOP ops at 1e-3)")
        ax.set_ylabel("speedup (baseline ms / candidate ms)")
        ax.set_title(plain(f"{candidate} against {baseline}"), fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return _svg(fig)


def geomeans_svg(summary: pd.DataFrame, baseline: str, candidate: str) -> str:
    """The geometric mean of each family and dtype (and of all cases) with its 95 % interval as a
    horizontal bar, beside the predicted geometric mean (x)."""
    rows = summary[summary["compared"] > 0] if not summary.empty else summary
    height = 1.2 + 0.28 * max(len(rows), 1)
    with _figure(7.0, height) as (fig, ax):
        if rows.empty:
            ax.text(0.5, 0.5, "no compared case", transform=ax.transAxes, ha="center")
        for y, (_, r) in enumerate(rows.iloc[::-1].iterrows()):
            value, low, high = float(r["speedup_geomean"]), r["speedup_low"], r["speedup_high"]
            has = low is not None and high is not None and low == low and high == high
            color = "black" if r["family"] == "all" else "tab:blue"
            if has:
                ax.plot([low, high], [y, y], "-", color=color, lw=2.0, solid_capstyle="butt")
            ax.plot([value], [y], "o" if has else "s", color=color, ms=5, mfc=color if has else "white")
            pred = r["predicted_geomean"]
            if pred == pred and pred is not None and not math.isnan(float(pred)):
                ax.plot([float(pred)], [y], "x", color="tab:red", ms=6)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([plain(f"{f} {d} ({n})".strip()) for f, d, n in
                            zip(rows["family"][::-1], rows["dtype"][::-1], rows["compared"][::-1], strict=True)],
                           fontsize=7)
        ax.axvline(1.0, color="gray", lw=0.8)
        ax.set_xlabel("geometric mean of the speedups: 95 % interval (bar), predicted (red x); hollow: no interval")
        ax.set_title(plain(f"{candidate} against {baseline}, by family and dtype (compared cases)"), fontsize=9)
        return _svg(fig)
