"""The history pages of the report: every series in one table, each opening to its full trend.

The data of a page is one JSON document inside the page (no file beside it, no request: the page
works when opened from disk): small tables of the strings every series shares (ops, dtypes, runs,
fingerprints), one entry per series (case key, codes into those tables, the gate's verdict) and the
points of all series as base64 typed arrays (run index, median as float32, p10 and p90 as offsets
of 1/2000 in log scale, why a point is kept out of a baseline, flush method, pace). A series is one
case on one physical device (its key and host in the page's table of devices); where its
environment changed (a driver, CUDA or torch version: a new fingerprint) the series says at which
point. The page's own script
(templates/history.js: plain JavaScript, no library, no external URL) draws the table, the
filters and the trends from it.

The verdicts are the gate's (reports.regressions.gate through reports.regressions.database_check): this
module judges nothing. One page holds every device while it stays under PAGE_POINTS points; beyond
that each model (device name) gets a page of its own, holding its devices, and history.html lists them.
"""
from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rooflab.db.series_query import HistoryColumns
from rooflab.reports.pages.templating import environment
from rooflab.reports.regressions.history_points import EXCLUDED, SeriesPoints
from rooflab.reports.regressions.options import Z_THRESHOLD
from rooflab.reports.regressions.verdicts import DRIFT, Verdict

PAGE_POINTS = 300_000  # points one page may hold before each device gets a page of its own
LOG_STEP = 2000.0  # p10 and p90 are stored as round(LOG_STEP * |log(p / median)|)
VERDICT_ORDER = (*tuple(Verdict), "unjudged")


@dataclass(frozen=True)
class HistoryPage:
    """One page: its file name, the devices it holds and its data."""

    file: str
    devices: tuple[str, ...]
    n_series: int
    n_points: int
    counts: dict[str, int]  # verdict (and drift) -> series
    data_json: str  # the page's data, safe to put inside a <script> element


def _b64(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values).tobytes()).decode("ascii")


def _log_offset(bound: np.ndarray, median: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        off = np.abs(np.log(bound.astype(np.float64) / median.astype(np.float64))) * LOG_STEP
    return np.clip(np.nan_to_num(off, nan=0.0, posinf=65535.0), 0, 65535).round().astype(np.uint16)


def _table(values: Iterable[Any]) -> tuple[list[str], np.ndarray]:
    codes, uniques = pd.factorize(pd.Series(list(values), dtype=object).fillna(""), sort=True)
    return [str(u) for u in uniques], codes


def _fingerprints(h: HistoryColumns, environments: np.ndarray) -> tuple[list[str], np.ndarray]:
    """_table of the fingerprints of these environment ids (one per point), worked out per distinct id."""
    ids, inverse = np.unique(environments, return_inverse=True)
    table, codes = _table(h.environments.set_index("environment_id")["device_fingerprint"].reindex(ids))
    return table, codes[inverse]


def _verdict_entry(v: Any, run_at: dict[str, int]) -> dict[str, Any]:
    """What the page shows of one SeriesVerdict (reports.regressions.gate), with runs as page run indices."""
    def run(run_id: str | None) -> int:
        return run_at.get(run_id, -1) if run_id else -1

    latest = v.latest
    base = v.baseline
    flagged = [run(f.run_id) for f in (v.previous, v.latest) if f is not None and f.flagged]
    return {
        "v": VERDICT_ORDER.index(v.status), "d": 1 if v.drift is not None else 0,
        "c": None if latest is None else round(float(latest.rel_change), 5),
        "b": None if base is None else float(f"{base.center_ms:.6g}"),
        "s": None if base is None else float(f"{base.spread_ms:.4g}"),
        "cp": [[run(c.run_id), round(c.rel_change, 4), float(f"{c.p_value:.2g}")] for c in v.change_points],
        "dr": None if v.drift is None else [run(v.drift.first_run), round(v.drift.rel_change, 4),
                                            v.drift.n_points],
        "fb": run(v.first_bad.run_id) if v.first_bad is not None else -1,
        "fl": [r for r in flagged if r >= 0], "nt": v.note,
    }


def _devices(h: HistoryColumns, pts: SeriesPoints, chosen: np.ndarray, judged: list[Any],
             slices: list[slice]) -> tuple[list[dict[str, Any]], list[int]]:
    """The page's table of devices (each series' device key and host, and its series id) and each
    chosen series' index into it. A device's host is the verdict's (the node its newest run names),
    else that of the run of the series' newest point."""
    hosts = h.runs["host"].astype(object).where(h.runs["host"].notna(), "").to_numpy()
    rows = []
    for i, v, sl in zip(chosen.tolist(), judged, slices, strict=True):
        code = int(pts.device[i])
        host = v.host if v is not None and v.host else str(hosts[pts.run_index[sl.stop - 1]])
        rows.append((pts.devices.ids[code], pts.devices.keys[code] or "", host))
    table, codes = _table(f"{a}\t{b}\t{c}" for a, b, c in rows)
    return [dict(zip(("id", "key", "host"), t.split("\t"), strict=True)) for t in table], codes.tolist()


def _page_data(h: HistoryColumns, pts: SeriesPoints, chosen: np.ndarray, verdicts: dict[tuple[str, str], Any],
               title: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The JSON document of one page holding the series `chosen` (indices into `pts`)."""
    slices = [pts.of(int(i)) for i in chosen]
    idx = np.concatenate([np.arange(s.start, s.stop) for s in slices]) if slices else np.empty(0, dtype=np.int64)
    used_runs = np.unique(pts.run_index[idx])
    page_run = np.full(len(h.runs), -1, dtype=np.int64)
    page_run[used_runs] = np.arange(len(used_runs))
    runs = h.runs.iloc[used_runs]
    cases = h.cases.set_index("case_id").loc[pts.case_id[chosen]]
    fp_table, fp_codes = _fingerprints(h, pts.point_environment[idx])  # every point's environment
    env_rows = h.environments.drop_duplicates("device_fingerprint").set_index("device_fingerprint").loc[fp_table]
    starts = np.cumsum([0] + [s.stop - s.start for s in slices])
    run_ids = runs["run_id"].astype(str).tolist()
    run_at = {r: i for i, r in enumerate(run_ids)}
    ids = [pts.devices.ids[int(d)] for d in pts.device[chosen]]
    series: dict[str, Any] = {"key": cases["case_key"].astype(str).tolist(),
                              "fp": [int(fp_codes[e - 1]) for e in starts[1:]] if len(chosen) else []}
    # where a series' environment changes (a new fingerprint: driver, CUDA or torch): point offset -> fingerprint
    changes = np.flatnonzero(np.diff(fp_codes) != 0) + 1 if len(idx) else np.empty(0, dtype=np.int64)
    owner = np.searchsorted(starts, changes, side="right") - 1
    env_changes: dict[str, list[list[int]]] = {}  # series -> [[0, its first fingerprint], [offset, the next], ...]
    for k, i in zip(changes.tolist(), owner.tolist(), strict=True):
        if k != starts[i]:  # the first point of a series is no change
            first = [[0, int(fp_codes[starts[i]])]]
            env_changes.setdefault(str(i), first).append([k - int(starts[i]), int(fp_codes[k])])
    series["ev"] = env_changes
    tables: dict[str, list[str]] = {}
    modes = [key.split(":")[4] if key.count(":") >= 5 else "" for key in series["key"]]
    caches = [key.split(":")[3] if key.count(":") >= 5 else "" for key in series["key"]]
    for name, values in (("op", cases["op"]), ("family", cases["family"]), ("dtype", cases["dtype"]),
                         ("backend", cases["backend"]), ("cache", caches), ("mode", modes)):
        tables[name], codes = _table(values)
        series[name] = codes.tolist()
    judged = [verdicts.get((k, d)) for k, d in zip(series["key"], ids, strict=True)]
    devices, series["dv"] = _devices(h, pts, chosen, judged, slices)
    entries = [_verdict_entry(v, run_at) if v is not None else {"v": len(VERDICT_ORDER) - 1, "d": 0, "c": None,
               "b": None, "s": None, "cp": [], "dr": None, "fb": -1, "fl": [], "nt": "not judged"} for v in judged]
    for field in ("v", "d", "c", "b", "s", "cp", "dr", "fb", "fl", "nt"):
        series[field] = [e[field] for e in entries]
    counts = {str(name): int(sum(e["v"] == i for e in entries)) for i, name in enumerate(VERDICT_ORDER)}
    counts[DRIFT] = int(sum(e["d"] for e in entries))
    when = runs["started_at"]
    data = {
        "title": title, "z": Z_THRESHOLD, "verdicts": list(VERDICT_ORDER), "excluded": list(EXCLUDED),
        "flush": list(h.values["flush_method"]), "pace": list(h.values["pace"]), "str": tables,
        "runs": {"id": run_ids, "t": [None if pd.isna(t) else int(t.timestamp()) for t in when],
                 "commit": [None if c is None or c != c else str(c)[:12] for c in runs["git_commit"]]},
        "fps": [{"fp": fp, "device": str(r["device_name"]), "driver": r["driver_version"], "cuda": r["cuda_version"],
                 "torch": r["torch_version"]} for fp, (_, r) in zip(fp_table, env_rows.iterrows(), strict=True)],
        "devs": devices, "series": series,
        "pts": {"n": int(len(idx)), "start": _b64(starts.astype(np.uint32)),
                "run": _b64(page_run[pts.run_index[idx]].astype(np.uint32)),
                "med": _b64(pts.median_ms[idx].astype(np.float32)),
                "lo": _b64(_log_offset(pts.p10_ms[idx], pts.median_ms[idx])),
                "hi": _b64(_log_offset(pts.p90_ms[idx], pts.median_ms[idx])),
                "x": _b64(pts.excluded[idx].astype(np.uint8)), "fl": _b64(pts.flush[idx].astype(np.int8)),
                "pc": _b64(pts.pace[idx].astype(np.int8))},
    }
    return data, counts


def safe_json(data: Any) -> str:
    """JSON that can sit inside a <script> element: no '<' (so no '</script>') and no NaN."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def history_pages(h: HistoryColumns, pts: SeriesPoints, verdicts: Iterable[Any], *,
                  slug: Callable[[str], str], page_points: int = PAGE_POINTS) -> list[HistoryPage]:
    """The pages: one (history.html) while every series fits in `page_points`, else one per device."""
    return list(iter_history_pages(h, pts, verdicts, slug=slug, page_points=page_points))


def iter_history_pages(h: HistoryColumns, pts: SeriesPoints, verdicts: Iterable[Any], *,
                       slug: Callable[[str], str], page_points: int = PAGE_POINTS) -> Iterator[HistoryPage]:
    """history_pages, one page at a time (a year of nightlies is 13 MB of data a device)."""
    by_key = {v.key: v for v in verdicts}
    env_device = h.environments.set_index("environment_id")["device_name"]
    devices = env_device.reindex(pts.environment_id).fillna("").astype(str).to_numpy()
    keys = h.cases.set_index("case_id")["case_key"].reindex(pts.case_id).astype(str).to_numpy()
    ids = np.array(pts.devices.ids, dtype=object)[pts.device].astype(str) if pts.n_series else keys
    order = np.lexsort((ids, keys, devices))  # by model, then case key, then device
    sizes = np.diff(pts.start)
    names = sorted(set(devices.tolist()))
    if int(sizes.sum()) <= page_points or len(names) <= 1:
        groups = [("history.html", tuple(names), order)]
    else:
        groups = [(f"history-{slug(n)}.html", (n,), order[devices[order] == n]) for n in names]
    for file, group_devices, chosen in groups:
        title = "history" if len(group_devices) != 1 else f"history: {group_devices[0]}"
        data, counts = _page_data(h, pts, chosen, by_key, title)
        yield HistoryPage(file, group_devices, len(chosen), int(sizes[chosen].sum()), counts, safe_json(_clean(data)))


def history_site(env: Any, history: Any, verdicts: Iterable[Any], slug: Callable[[str], str], *,
                 has_compare: bool = False, page_points: int = PAGE_POINTS) -> dict[str, str]:
    """File name -> HTML of the history pages of `history` (reports.regressions.history_points.HistoryData; None: no
    results), all in memory (`write_history_site` writes them one at a time)."""
    pages = ([] if history is None or history.points.n_series == 0
             else history_pages(history.tables, history.points, verdicts, slug=slug, page_points=page_points))
    out: dict[str, str] = {}
    for page in pages:
        out[page.file] = env.get_template("history.html").render(
            title=f"rooflab: {page_title(page)}", page=page, page_points=page_points, has_compare=has_compare,
            listed=None)
    if len(pages) != 1:
        out["history.html"] = env.get_template("history_index.html").render(
            title="rooflab: history", pages=pages, page_points=page_points, has_compare=has_compare, listed=None)
    return out


def page_title(page: HistoryPage) -> str:
    return "history" if len(page.devices) != 1 else f"history of {page.devices[0]}"


def write_history_site(out_dir: Path, history: Any, verdicts: Iterable[Any], slug: Callable[[str], str], *,
                       has_compare: bool = False, page_points: int = PAGE_POINTS,
                       listed: int | None = None) -> list[HistoryPage]:
    """Write the history pages of `history` (reports.regressions.history_points.HistoryData) into `out_dir`, one page
    built and written at a time; the pages come back without their data. `listed`: the pages draw the
    flagged series of a fleet's history only, and series.html lists all `listed` series."""
    env, written = environment(), []
    verdicts = list(verdicts)
    pages = ([] if history is None or history.points.n_series == 0
             else iter_history_pages(history.tables, history.points, verdicts, slug=slug, page_points=page_points))
    for page in pages:
        html = env.get_template("history.html").render(title=f"rooflab: {page_title(page)}", page=page,
                                                       page_points=page_points, has_compare=has_compare, listed=listed)
        (out_dir / page.file).write_text(html, encoding="utf-8")
        written.append(replace(page, data_json=""))
    if len(written) != 1:
        (out_dir / "history.html").write_text(env.get_template("history_index.html").render(
            title="rooflab: history", pages=written, page_points=page_points, has_compare=has_compare,
            listed=listed), encoding="utf-8")
    return written
