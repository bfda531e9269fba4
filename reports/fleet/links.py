"""The link matrix judged (`rooflab fleet --links`): which link, GPU or node of a night's matrices of
pairs is slow (docs/collectives.md, "The link matrix"; docs/fleet.md, "Links").

Each pair's result (suite/ops/pairs.py) names its two ends. Its siblings are the pairs of the same
kind (within a node, or between nodes), model and matrix case (size, direction, pairs at once) that
night: every node's matrix of its GPUs together, or the matrix of nodes. Per night and group of
siblings, the log of each pair's median time is taken as the sum of a part common to the group, a
part of each end and what is left, the pair's own:

    y(a, b) = mu + e(a) + e(b) + r(a, b)

fitted robustly by median polish (each end's part the median over its pairs, link_frames.POLISH_ROUNDS sweeps;
median polish need not converge exactly, and the fit is what those sweeps give): an end
whose pairs are all slow takes the slowness into its own part, and a pair slow alone keeps it in
its residual (judged only in a group of at least link_frames.LINK_MIN_ENDS ends: in a smaller one
the residuals are mostly the fit's own). Then, as the fleet does for a device's walls
(deviations.py, statuses.py), per night:

- an end's deviation is -e, its matrices (sizes, directions) averaged with weights 1 / the group's
  spread^2, with a standard error from the group's spread over its pairs and their own intervals;
- a link's deviation is the pair against its siblings' common part (mu - y: the median pair would
  sit among a slow end's pairs), and its residual -r, likewise;
- each is held against a warn and a drain line drawn from its siblings' robust spread (at least the
  typical standard error among them: a figure within its own noise flags nobody), with the rule of
  statuses.sibling_status (suspect one night beyond the warn line, slow confirmed, drain). A link's
  warn line is never inside the warn threshold itself: a node of 8 GPUs has 28 links and a fleet of
  them thousands, and a line moved in to three spreads where the pairs agree closely would flag a
  few of them by chance every night.

A slow end (a GPU, a node, a CPU's rank) is flagged, and so is each of its pairs, for that end. A
pair flagged for itself, with both of its ends fine, is a slow link. A group with fewer than
`min_devices` ends is not judged (with three, one slow end makes half the pairs slow and the fit
cannot tell which end it is).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from rooflab.reports.fleet.deviations import MODEL, prepare
from rooflab.reports.fleet.link_frames import end_table, link_table, pair_rows
from rooflab.reports.fleet.link_records import (
    EndJudgement,
    Judged,
    LinkCause,
    LinkJudgement,
    LinkKind,
    LinksNight,
)
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import NightInfo
from rooflab.reports.fleet.robust import Z95, drain_line_pct, pct_array, spread, warn_line_pct
from rooflab.reports.fleet.status import FLAGGED, SEVERITY, FleetStatus
from rooflab.reports.fleet.statuses import sibling_status
from rooflab.suite.ops.pairs import PAIRS_OP

JUDGED_NIGHTS = 3  # tonight and the two nights before: the status rule's nights


class NoLinks(ValueError):
    """The results hold no pair of a link matrix to judge."""


def judge_links(results: pd.DataFrame, options: FleetOptions = FleetOptions()) -> LinksNight:
    """The judgement of the newest links night of `results` (the fleet's columns,
    deviations.FLEET_COLUMNS); NoLinks when it holds no pair's result."""
    prepared = prepare(results[results["op"] == PAIRS_OP], options)
    if not prepared.nights or prepared.rows.empty:
        raise NoLinks(f"no pair of a link matrix (op {PAIRS_OP}) in the runs of suite {options.suite!r}")
    rows = pair_rows(prepared.rows[prepared.rows["night"] < JUDGED_NIGHTS], options)
    ends, links = end_table(rows), link_table(rows)
    night = prepared.nights[0]
    info = NightInfo(options.suite, night.first_started_at, night.last_started_at, prepared.night_runs[0],
                     len(prepared.nights) - 1)
    end_records = _ends(ends, rows, options)
    status_of = {(e.kind, e.end): e.status for e in end_records}
    matrices = tuple(sorted(str(m) for m in rows.loc[rows["night"] == 0, "matrix"].unique()))
    return LinksNight(info, options, end_records, _links(links, status_of, options), matrices)


END_KEYS = [*MODEL, "kind", "end"]
LINK_KEYS = [*MODEL, "kind", "a", "b", "a_host", "a_device", "b_host", "b_device"]


def _judged(frame: pd.DataFrame, keys: list[str], options: FleetOptions, floor_pct: float = 0.0) -> pd.DataFrame:
    """`frame` (one row per thing of `keys` and night: `d` its log deviation, `se` the standard error)
    with tonight's rows judged: status, deviation, low, high, z, spread, warn and drain lines (the warn
    line never inside `floor_pct`); the two nights before give the rule its history. The rule is
    applied to 100 x the log ratios, not to percents of speed: a pair 10x slower is -230 there, -90 %
    of speed, and a line drawn from a wide spread (a CPU's noisy matrix) may pass 100; the figures
    shown (and the lines) are then turned into percents of speed."""
    tonight = frame[frame["night"] == 0].copy()
    before = frame[frame["night"].isin((1, 2))].pivot_table(index=keys, columns="night", values="d", aggfunc="first")
    tonight = tonight.join(before.rename(columns={1: "d1", 2: "d2"}), on=keys)
    for c in ("d1", "d2"):
        if c not in tonight:
            tonight[c] = np.nan
    groups = tonight.groupby([*MODEL, "kind"], sort=False)
    sibling = groups["d"].transform(lambda x: spread(x.to_numpy()))
    typical = groups["se"].transform("median")
    scale = 100.0 * np.maximum(sibling.to_numpy(dtype=float), typical.to_numpy(dtype=float))
    d, se = tonight["d"].to_numpy(dtype=float), tonight["se"].to_numpy(dtype=float)
    line = np.maximum(warn_line_pct(scale, options.warn_pct), floor_pct)
    drain = drain_line_pct(scale, options.drain_pct)
    log100 = {"d": 100.0 * d, "high": 100.0 * (d + Z95 * se), "d1": 100.0 * tonight["d1"].to_numpy(dtype=float),
              "d2": 100.0 * tonight["d2"].to_numpy(dtype=float)}
    status = sibling_status(log100["d"], log100["high"], log100["d1"], log100["d2"], line, drain)
    tonight["status"] = np.where(tonight["judged"].to_numpy(dtype=bool), status, FleetStatus.NOT_JUDGED.value)
    return tonight.assign(deviation_pct=pct_array(d), low_pct=pct_array(d - Z95 * se), high_pct=pct_array(
        d + Z95 * se), z=d / np.maximum(scale / 100.0, 1e-12), spread_pct=scale,
        warn_line_pct=-pct_array(-line / 100.0), drain_line_pct=-pct_array(-drain / 100.0))


def _as_judged(r: dict) -> Judged:
    return Judged(FleetStatus(r["status"]), float(r["deviation_pct"]), float(r["low_pct"]), float(r["high_pct"]),
                  float(r["z"]), float(r["spread_pct"]), float(r["warn_line_pct"]), float(r["drain_line_pct"]))


def _ends(ends: pd.DataFrame, rows: pd.DataFrame, options: FleetOptions) -> tuple[EndJudgement, ...]:
    judged = _judged(ends, END_KEYS, options)
    hosts = _end_places(rows)
    out = []
    for r in judged.to_dict("records"):
        host, device = hosts.get((r["kind"], r["end"]), ("?", "?"))
        ok = bool(r["judged"])
        out.append(EndJudgement(str(r["end"]), host, device, LinkKind(r["kind"]), str(r["device_name"]),
                                _as_judged(r) if ok else None, int(r["pairs"]),
                                None if ok else f"fewer than --min-devices {options.min_devices} ends in its matrix"))
    return tuple(sorted(out, key=lambda e: (e.kind != LinkKind.ACROSS_NODES, -SEVERITY[e.status], e.host, e.end)))


def _end_places(rows: pd.DataFrame) -> dict[tuple[str, str], tuple[str, str]]:
    """(kind, end label) -> (host, device key), as tonight's pairs name them."""
    tonight = rows[rows["night"] == 0]
    out = {}
    for side in ("a", "b"):
        for kind, label, host, device in zip(tonight["kind"], tonight[side], tonight[f"{side}_host"],
                                             tonight[f"{side}_device"], strict=True):
            out[(str(kind), str(label))] = (str(host), str(device))
    return out


def _links(links: pd.DataFrame, end_status: dict[tuple[LinkKind, str], FleetStatus],
           options: FleetOptions) -> tuple[LinkJudgement, ...]:
    judged = _judged(links, LINK_KEYS, options, floor_pct=options.warn_pct)
    out = []
    for r in judged.to_dict("records"):
        kind = LinkKind(r["kind"])
        sa, sb = end_status.get((kind, r["a"]), FleetStatus.NOT_JUDGED), end_status.get((kind, r["b"]),
                                                                                        FleetStatus.NOT_JUDGED)
        own = FleetStatus(r["status"])
        status, cause = own, LinkCause.LINK if own in FLAGGED else None
        if sa in FLAGGED or sb in FLAGGED:  # a slow end explains its pairs
            status = max((s for s in (sa, sb) if s in FLAGGED), key=SEVERITY.__getitem__)
            cause = (LinkCause.BOTH_ENDS if sa in FLAGGED and sb in FLAGGED
                     else LinkCause.END_A if sa in FLAGGED else LinkCause.END_B)
        total, total_se = float(r["total"]), float(r["total_se"])
        out.append(LinkJudgement(
            str(r["a"]), str(r["b"]), str(r["a_host"]), str(r["a_device"]), str(r["b_host"]), str(r["b_device"]),
            kind, status, cause, float(pct_array(np.array([total]))[0]),
            float(pct_array(np.array([total - Z95 * total_se]))[0]),
            float(pct_array(np.array([total + Z95 * total_se]))[0]),
            _as_judged(r) if bool(r["judged"]) else None, int(r["matrices"]), float(r["median_ms"])))
    return tuple(sorted(out, key=lambda k: (k.kind != LinkKind.ACROSS_NODES, k.a_host, k.a, k.b)))
