"""The series `rooflab history` shows: chosen by case key or by filters, each with its runs and the
gate's verdict (reports.regressions.series.detect on the series' whole history: the verdict `rooflab
regressions` gives it). Reads the database through db.query and db.series_query; judges nothing of
its own. Nothing matching is a ReportInputError that names the nearest case keys (difflib).
"""
from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rooflab.db.handle import Db
from rooflab.db.query import device_hosts, result_devices, results
from rooflab.db.series_query import case_keys, cases
from rooflab.reports.data.devices import device_matches, series_ids
from rooflab.reports.data.frames import select_device
from rooflab.reports.data.reads import nothing_stored
from rooflab.reports.errors import ReportInputError
from rooflab.reports.regressions.database_check import with_hosts
from rooflab.reports.regressions.gate import SeriesVerdict
from rooflab.reports.regressions.link_check import table_of
from rooflab.reports.regressions.series import (
    DETECT_COLUMNS,
    ENV_COLUMNS,
    METHOD_COLUMNS,
    detect,
    run_points,
    series_points,
)
from rooflab.reports.regressions.verdicts import DRIFT, Verdict
from rooflab.suite.errors import SpecError
from rooflab.suite.filters import CASE_KEYS, parse_filters
from rooflab.vocab import ResultStatus, SeriesBy

VIEW_COLUMNS = tuple(dict.fromkeys(DETECT_COLUMNS + ("p10_ms", "p90_ms", *METHOD_COLUMNS, "op", "family", "backend",
                                                     "dtype", "cache", "timing_mode", "params")))
VERDICT_KEY = "verdict"
NEAREST = 5


@dataclass(frozen=True)
class SeriesView:
    """One series (a case on one device, or by model on one device fingerprint): the gate's verdict
    and every run's point."""

    verdict: SeriesVerdict
    runs: pd.DataFrame  # one row per run with a point: run_id, started_at, git_commit, median_ms, p10_ms,
    # p90_ms, excluded (why it is kept out of a baseline, "" if not), flush_method, segment_start (why, or "")

    @property
    def kind(self) -> str:
        """The verdict, with " + drift" when the history pass found one."""
        return str(self.verdict.status) + (" + drift" if self.verdict.drift is not None else "")

    def as_dict(self) -> dict[str, Any]:
        runs = self.runs.assign(started_at=self.runs["started_at"].astype(str))
        return {**self.verdict.as_dict(), "runs": json.loads(runs.to_json(orient="records"))}


def _per_run(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (series, run) of a frame with its `series` column: the medians of the ok results' p10
    and p90, and the flush method and environment."""
    ok = frame[frame["status"] == ResultStatus.OK]
    keys = ["case_key", "series", "run_id"]
    agg = ok.groupby(keys, sort=False).agg(p10_ms=("p10_ms", "median"), p90_ms=("p90_ms", "median"))
    method = frame.assign(**{c: frame[c].astype(object).where(frame[c].notna(), "") for c in METHOD_COLUMNS})
    agg = agg.join(method.groupby(keys, sort=False)[list(METHOD_COLUMNS)].first())
    envs = (ok if len(ok) else frame).groupby(keys, sort=False)[list(ENV_COLUMNS)].first()
    return agg.join(envs).reset_index()


SEGMENT_WORDS = {"device_fingerprint": "fingerprint"}  # how a reason names its column (else its first word)


def _segment_reasons(runs: pd.DataFrame) -> list[str]:
    """Why a segment starts at each run (a new fingerprint, a driver, CUDA or torch change, or a change
    of the way it was measured: flush method, pace; the columns reports.regressions.series segments
    by), "" elsewhere. A method a run does not record (stored before it was) is no change, as for the gate."""
    out = [""] * len(runs)
    for c in (*ENV_COLUMNS, *METHOD_COLUMNS):
        if c not in runs.columns:
            continue
        now = runs[c].astype(object).where(runs[c].notna(), "").astype(str).tolist()
        if c in METHOD_COLUMNS:  # carry the newest recorded value over runs that recorded none
            for i in range(1, len(now)):
                now[i] = now[i] or now[i - 1]
        for i in range(1, len(now)):
            if now[i] != now[i - 1] and (c not in METHOD_COLUMNS or now[i - 1]):
                what = f"{SEGMENT_WORDS.get(c, c.split('_')[0])} {now[i - 1] or '?'} -> {now[i] or '?'}"
                out[i] = f"{out[i]}, {what}" if out[i] else what
    return out


def views(frame: pd.DataFrame, context: pd.DataFrame | None = None,
          by: SeriesBy = SeriesBy.DEVICE) -> list[SeriesView]:
    """A SeriesView per series of the results frame `frame` (VIEW_COLUMNS; each case on each device,
    or by model on each device fingerprint); `context`: a frame that holds `frame`'s series and
    more, judged together (a collective's other message sizes, which the two-run check of
    reports.regressions.link_check reads)."""
    if frame.empty:
        return []
    verdicts = {v.key: v for v in detect(frame if context is None else context, by=by)}
    keys = ["case_key", "series", "run_id"]
    points = run_points(frame, by).drop(columns=["device_fingerprint"])  # _per_run has each run's
    merged = points.merge(_per_run(frame.assign(series=series_ids(frame, by))), on=keys, how="left")
    out = []
    for (key, series), rows in merged.groupby(["case_key", "series"], sort=True):
        rows = rows.sort_values(["order", "run_id"], kind="stable")
        pts = {p.run_id: p for p in series_points(rows)}
        runs = rows[rows["run_id"].isin(list(pts))].reset_index(drop=True)
        table = pd.DataFrame({
            "run_id": runs["run_id"], "started_at": runs["started_at"], "git_commit": runs["git_commit"],
            "median_ms": runs["median_ms"], "p10_ms": runs["p10_ms"], "p90_ms": runs["p90_ms"],
            "excluded": [pts[r].excluded_because or "" for r in runs["run_id"]],
            "flush_method": runs["flush_method"].fillna(""), "pace": runs["pace"].fillna(""),
        })
        table["segment_start"] = _segment_reasons(runs) if len(runs) else []
        out.append(SeriesView(verdicts[(key, series)], table))
    return out


def _matching_keys(cases: pd.DataFrame, parsed: dict[str, set[str]]) -> tuple[list[str], pd.Series]:
    """(case keys matching every filter, how many filters each case matches)."""
    hits = pd.Series(0, index=cases.index)
    for key, wanted in parsed.items():
        if key in CASE_KEYS:
            column = cases[key].astype(str) if key in cases.columns else pd.Series("", index=cases.index)
            hits += column.isin(wanted).astype(int)
        else:
            values = [json.loads(p).get(key) for p in cases["params"]]
            hits += pd.Series([str(v).lower() in {w.lower() for w in wanted} if v is not None else False
                               for v in values], index=cases.index).astype(int)
    return cases.loc[hits == len(parsed), "case_key"].tolist(), hits


def nearest_keys(wanted: str, keys: Sequence[str], n: int = NEAREST) -> list[str]:
    """The case keys most like `wanted` (difflib), best first."""
    close = difflib.get_close_matches(wanted, list(keys), n=n, cutoff=0.0)
    return close[:n]


def case_keys_for(cases: pd.DataFrame, filters: Sequence[str]) -> tuple[list[str], dict[str, set[str]]]:
    """(case keys matching `filters`, the verdict values asked for). ReportInputError for a
    malformed filter, or none matching (naming the nearest case keys: those matching the most
    filters, then the most like the filters' text)."""
    verdict_filters = [f for f in filters if f.split("=", 1)[0].strip() == VERDICT_KEY]
    others = [f for f in filters if f not in verdict_filters]
    allowed_verdicts = [*map(str, Verdict), DRIFT]
    wanted_verdicts: set[str] = set()
    for text in verdict_filters:
        for value in (v.strip() for v in text.split("=", 1)[1].split(",") if v.strip()):
            if value not in allowed_verdicts:
                raise ReportInputError(f"--filter {text!r}: unknown verdict {value!r}; allowed: "
                                       f"{', '.join(allowed_verdicts)}")
            wanted_verdicts.add(value)
    names = {k for p in cases["params"] for k in json.loads(p)}
    try:
        parsed = parse_filters(others, names)
    except SpecError as exc:
        raise ReportInputError(f"--filter: {exc}") from None
    cases = cases.assign(cache=[k.split(":")[3] if k.count(":") >= 5 else "" for k in cases["case_key"]],
                         timing_mode=[k.split(":")[4] if k.count(":") >= 5 else "" for k in cases["case_key"]])
    keys, hits = _matching_keys(cases, parsed) if parsed else (cases["case_key"].tolist(), None)
    if not keys:
        text = " ".join(sorted(v for vs in parsed.values() for v in vs))
        best = cases.assign(_hits=hits).sort_values("_hits", ascending=False)
        top = best[best["_hits"] == best["_hits"].max()]["case_key"].tolist()
        near = nearest_keys(text, top) if len(top) > NEAREST else top[:NEAREST]
        raise ReportInputError(f"no case in the database matches {' '.join(others)}; nearest case keys: "
                               f"{', '.join(near) or 'none (the database has no cases)'}")
    return keys, {VERDICT_KEY: wanted_verdicts} if wanted_verdicts else {}


def select_views(found: list[SeriesView], verdicts: dict[str, set[str]], last: int | None) -> list[SeriesView]:
    """`found` with only the verdicts asked for, and only the newest `last` runs of each."""
    wanted = verdicts.get(VERDICT_KEY)
    out = []
    for v in found:
        if wanted and not (str(v.verdict.status) in wanted or (DRIFT in wanted and v.verdict.drift is not None)):
            continue
        out.append(SeriesView(v.verdict, v.runs.tail(last).reset_index(drop=True)) if last else v)
    return out


def load_series_views(url: Db, *, case_key: str | None = None, filters: Sequence[str] = (),
                      device: str | None = None, last: int | None = None,
                      by: SeriesBy = SeriesBy.DEVICE) -> list[SeriesView]:
    """The series `rooflab history` shows, read from the database at `url`: one case's series, or those of the
    cases matching `filters`, on `device` only when given (a device: its key, a prefix of it or its
    host; or a model: reports.data.frames.select_device), with the newest `last` runs each; a
    series per device, or per model (`by`). ReportInputError naming the nearest case keys when
    nothing matches."""
    if nothing_stored(url):
        raise ReportInputError("the database holds no results yet")
    verdicts: dict[str, set[str]] = {}
    if case_key is not None:
        frame = results(url, case_key=case_key, columns=VIEW_COLUMNS)
        if frame.empty:
            near = nearest_keys(case_key, case_keys(url))
            raise ReportInputError(f"no results for case {case_key!r}; nearest case keys: {', '.join(near) or 'none'}")
    else:
        keys, verdicts = case_keys_for(cases(url), filters)
        frame = pd.concat([results(url, case_key=keys[i:i + 500], columns=VIEW_COLUMNS)
                           for i in range(0, len(keys), 500)], ignore_index=True)
    if device is not None:
        frame = _on_device(url, frame, device)
    found = select_views(views(frame, _with_sizes(url, frame, by), by), verdicts, last)
    if not found:
        raise ReportInputError(f"no series matches {' '.join(filters)}: none has the verdict asked for")
    if by == SeriesBy.DEVICE:  # each device's host as its newest run's environment names it
        hosts = device_hosts(url, run_ids_of(frame))
        found = [SeriesView(judged, v.runs) for v, judged in
                 zip(found, with_hosts([v.verdict for v in found], hosts), strict=True)]
    return found


def run_ids_of(frame: pd.DataFrame) -> list[str]:
    """The runs of a results frame, in run order."""
    return frame.sort_values("run_order")["run_id"].astype(str).drop_duplicates().tolist()


def _on_device(url: Db, frame: pd.DataFrame, device: str) -> pd.DataFrame:
    """The rows of `frame` on `device`: a physical device (reports.data.devices.device_matches), else
    a model (reports.data.frames.select_device, which names the models there are)."""
    mask = device_matches(frame, device)
    if mask is not None:
        return frame[mask]
    try:
        name, chosen = select_device(result_devices(url), device)
    except ReportInputError as exc:
        raise ReportInputError(f"{exc}; or a device key (a GPU's UUID, or a prefix of it) or a host") from None
    frame = frame[frame["device_fingerprint"].isin(set(chosen["device_fingerprint"]))]
    if frame.empty:
        raise ReportInputError(f"--device {device!r}: no result of {name} for the case(s) asked for")
    return frame


def _with_sizes(url: Db, frame: pd.DataFrame, by: SeriesBy) -> pd.DataFrame | None:
    """`frame` with the other message sizes of its collective tests (reports.regressions.link_check judges a test
    as a whole) on its series' devices, or None when it holds no collective case."""
    tables = {t[0] for t in map(table_of, frame["case_key"].astype(str).unique()) if t is not None}
    if not tables:
        return None
    shown = set(frame["case_key"].astype(str))
    more = [k for k in case_keys(url) if k not in shown and (t := table_of(k)) is not None and t[0] in tables]
    extra = [results(url, case_key=more[i:i + 500], columns=VIEW_COLUMNS) for i in range(0, len(more), 500)]
    mine = set(series_ids(frame, by))
    extra = [e[series_ids(e, by).isin(mine)] for e in extra]
    return pd.concat([frame, *extra], ignore_index=True) if extra else frame
