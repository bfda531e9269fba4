"""The link matrix's frames (pure): each pair's ends and siblings, the fit of each group of siblings,
and each end's and link's deviation night by night (reports/fleet/links.py judges them).

- `pair_rows`: the prepared pair results (deviations.prepare) with their matrix, their ends (read
  from their case keys, suite.ops.pairs.pair_of_key), their kind and the label of each end: the node
  between nodes; within one, the device key, or `host:rankR` where ranks share a device (a CPU);
- `polish`: one group's fit, y(a, b) = mu + e(a) + e(b) + r(a, b), by median polish;
- `end_table`, `link_table`: per night, each end's deviation (-e) and each link's (its residual -r,
  and the pair as a whole against its siblings' common part, mu - y), over the matrices averaged
  with weights 1 / the group's spread^2, with standard errors.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from rooflab.reports.fleet.deviations import MODEL
from rooflab.reports.fleet.link_records import LinkKind
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.robust import MEDIAN_SE_FACTOR, spread
from rooflab.suite.ops.pairs import pair_of_key

POLISH_ROUNDS = 10
# ends a group needs before its pairs are judged on their own (a slow link): 6 ends give 15 pairs
# for 7 parts; with 4 (6 pairs for 5 parts) the residuals are mostly the fit's own, and a slow end
# and a slow link cannot be told apart (tests/reports/fleet/test_links.py), so such a group names
# slow ends only
LINK_MIN_ENDS = 6
GROUP = ["night", *MODEL, "matrix", "kind"]  # a group of siblings: one matrix case of one kind and model, a night
SIDES = ("a", "b")


def pair_rows(rows: pd.DataFrame, options: FleetOptions) -> pd.DataFrame:
    """The prepared rows of pair results with their matrix, ends, kind, end labels, and whether their
    group has at least `options.min_devices` ends (`judged`: its ends are judged) and LINK_MIN_ENDS
    (`links_judged`: its pairs are too)."""
    found = [pair_of_key(str(k)) for k in rows["case_key"]]
    keep = np.array([p is not None for p in found], dtype=bool)
    rows, parsed = rows[keep].reset_index(drop=True), [p for p in found if p is not None]
    ends = [p[1] for p in parsed]
    out = pd.DataFrame({
        "night": rows["night"].to_numpy(), **{k: rows[k].astype(object).to_numpy() for k in MODEL},
        "matrix": [p[0] for p in parsed], "y": rows["y"].to_numpy(), "u": rows["u"].to_numpy(),
        "median_ms": rows["median_ms"].to_numpy(),
        **{f"{s}_{f}": [getattr(e, f"{s}_{f}") for e in ends] for s in SIDES for f in ("rank", "host", "device")},
    })
    out["kind"] = np.where(out["a_host"] != out["b_host"], LinkKind.ACROSS_NODES.value, LinkKind.SAME_NODE.value)
    shared = _shared_devices(out)
    for s in SIDES:
        own = [(n, m, h, d) in shared for n, m, h, d in zip(out["night"], out["matrix"], out[f"{s}_host"],
                                                            out[f"{s}_device"], strict=True)]
        within = np.where(own, out[f"{s}_host"] + ":rank" + out[f"{s}_rank"].astype(str), out[f"{s}_device"])
        out[s] = np.where(out["kind"] == LinkKind.ACROSS_NODES.value, out[f"{s}_host"], within)
    counts = pd.concat([out[[*GROUP, s]].rename(columns={s: "end"}) for s in SIDES]).drop_duplicates()
    out["ends"] = out.join(counts.groupby(GROUP).size().rename("ends"), on=GROUP)["ends"]
    out["judged"] = out["ends"] >= options.min_devices
    out["links_judged"] = out["judged"] & (out["ends"] >= LINK_MIN_ENDS)
    return out


def _shared_devices(rows: pd.DataFrame) -> set[tuple]:
    """(night, matrix, host, device key) of devices that hold several ranks of a matrix (a CPU's)."""
    sides = pd.concat([rows[["night", "matrix", f"{s}_host", f"{s}_device", f"{s}_rank"]].set_axis(
        ["night", "matrix", "host", "device", "rank"], axis=1) for s in SIDES])
    ranks = sides.groupby(["night", "matrix", "host", "device"])["rank"].nunique()
    return set(ranks[ranks > 1].index)


def polish(a: np.ndarray, b: np.ndarray, y: np.ndarray, ends: int, rounds: int = POLISH_ROUNDS
           ) -> tuple[float, np.ndarray, np.ndarray]:
    """(mu, each end's part e, each pair's residual r) of y(a, b) = mu + e(a) + e(b) + r(a, b), `a` and
    `b` the ends' indices (0 .. ends-1). It starts from each end's median pair (an end's part is its
    median pair's distance from the median end's: the median of all pairs would sit among a slow end's
    pairs, which are half of them in a group of four), then sets each end's part to the median of its
    pairs' y less the common part and their other ends' parts, end after end, `rounds` times, the
    parts' median kept at 0. A fixed number of sweeps, not a search for a fixed point: median polish
    need not converge exactly (a sweep may move a part back and forth by less than the pairs'
    spread), and the fit is what these sweeps give, the same for the same figures."""
    members = [np.flatnonzero((a == i) | (b == i)) for i in range(ends)]
    typical = np.array([float(np.median(y[idx])) if idx.size else np.nan for idx in members])
    mu = float(np.nanmedian(typical))
    e = np.nan_to_num(typical - mu)
    mu -= float(np.median(e))  # y ~ mu + e(a) + e(b): the median end's pair is mu plus the median part, twice
    for _ in range(rounds):
        for i, idx in enumerate(members):
            if idx.size:
                other = np.where(a[idx] == i, b[idx], a[idx])
                e[i] = float(np.median(y[idx] - mu - e[other]))
        centre = float(np.median(e))
        e -= centre
        mu += 2.0 * centre
    return mu, e, y - mu - e[a] - e[b]


def _fitted(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per judged group: each end's part with its standard error, and each pair's residual and total
    deviation with theirs; w = 1 / the group's spread^2 (the weight of its matrix for an end or link)."""
    end_parts, pair_parts = [], []
    for key, g in rows[rows["judged"]].groupby(GROUP, sort=False):
        labels = pd.Index(sorted(set(g["a"]) | set(g["b"])))
        a, b = labels.get_indexer(g["a"]), labels.get_indexer(g["b"])
        y, u = g["y"].to_numpy(dtype=float), g["u"].to_numpy(dtype=float)
        mu, e, r = polish(a, b, y, len(labels))
        sigma = spread(r)
        k = np.bincount(np.concatenate([a, b]), minlength=len(labels))
        u2 = np.bincount(np.concatenate([a, b]), weights=np.concatenate([u, u]) ** 2, minlength=len(labels))
        end_se = np.sqrt((MEDIAN_SE_FACTOR * sigma) ** 2 / k + u2 / k ** 2)
        fields = dict(zip(GROUP, key, strict=True))
        end_parts.append(pd.DataFrame({**fields, "end": labels, "e": e, "se": end_se, "pairs": k,
                                       "w": 1.0 / sigma ** 2}))
        fit_se = MEDIAN_SE_FACTOR * sigma * np.sqrt(1.0 / k[a] + 1.0 / k[b])
        pair_parts.append(g.assign(r=r, r_se=np.sqrt(u ** 2 + fit_se ** 2), t=mu - y,
                                   t_se=np.sqrt(u ** 2 + (MEDIAN_SE_FACTOR * sigma) ** 2 / len(g)),
                                   w=1.0 / sigma ** 2))
    return (pd.concat(end_parts, ignore_index=True) if end_parts else pd.DataFrame(),
            pd.concat(pair_parts, ignore_index=True) if pair_parts else pd.DataFrame())


def _weighted(frame: pd.DataFrame, keys: list[str], value: str, se: str, sign: float) -> pd.DataFrame:
    """Per group of `keys`: sign x the w-weighted mean of `value`, and its standard error."""
    w = frame["w"]
    parts = pd.DataFrame({**{k: frame[k] for k in keys}, "w": w, "wv": w * sign * frame[value],
                          "w2s2": (w * frame[se]) ** 2})
    agg = parts.groupby(keys, sort=False).agg(sw=("w", "sum"), swv=("wv", "sum"), sw2s2=("w2s2", "sum"))
    return pd.DataFrame({value: agg["swv"] / agg["sw"], se: np.sqrt(agg["sw2s2"]) / agg["sw"]})


def end_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (night, model, kind, end): d (its deviation, log), se, pairs, judged."""
    keys = ["night", *MODEL, "kind", "end"]
    ends, _ = _fitted(rows)
    every = pd.concat([rows[["night", *MODEL, "kind", s, "judged"]].rename(columns={s: "end"}) for s in SIDES])
    base = every.groupby(keys, sort=False)["judged"].any().reset_index()
    if ends.empty:
        return base.assign(d=np.nan, se=np.nan, pairs=0)
    fitted = _weighted(ends, keys, "e", "se", -1.0).rename(columns={"e": "d"})
    pairs = ends.groupby(keys, sort=False)["pairs"].sum()
    return base.join(fitted, on=keys).join(pairs, on=keys).fillna({"pairs": 0})


def link_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (night, model, kind, a, b): d (its residual's deviation, log), se, total (the pair
    against its group's fitted common part mu, log: mu - y) and total_se, matrices, median_ms, judged."""
    keys = ["night", *MODEL, "kind", "a", "b", "a_host", "a_device", "b_host", "b_device"]
    _, pairs = _fitted(rows)
    base = rows.groupby(keys, sort=False).agg(judged=("links_judged", "any"), matrices=("matrix", "nunique"),
                                              median_ms=("median_ms", "first")).reset_index()
    if pairs.empty:
        return base.assign(d=np.nan, se=np.nan, total=np.nan, total_se=np.nan)
    residual = _weighted(pairs, keys, "r", "r_se", -1.0).rename(columns={"r": "d", "r_se": "se"})
    total = _weighted(pairs, keys, "t", "t_se", 1.0).rename(columns={"t": "total", "t_se": "total_se"})
    return base.join(residual, on=keys).join(total, on=keys)
