"""The regression check over a results database: read the newest runs, judge every series
(reports.regressions.series, reports.regressions.gate), and read again in full only the series that
need it. The reads go through a HistorySource: the database (DatabaseSource), or the history's
columns when the report has read them already (reports.regressions.columns_source). `load_verdicts`
is the check as `rooflab regressions` asks it of a database (none while nothing is stored there).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

import numpy as np
import pandas as pd

from rooflab.db import query, series_query
from rooflab.db.handle import Db
from rooflab.reports.data.devices import HOST_SEPARATOR, TOOL_SEPARATOR, series_ids
from rooflab.reports.data.reads import nothing_stored
from rooflab.reports.regressions.column_frames import ColumnFrames
from rooflab.reports.regressions.gate import CHANGE_HISTORY, Point, SeriesVerdict, window_suffices
from rooflab.reports.regressions.link_check import link_checked, table_of
from rooflab.reports.regressions.options import MIN_BASELINE, MIN_CHANGE, WINDOW, Z_THRESHOLD, RegressionOptions
from rooflab.reports.regressions.series import DETECT_COLUMNS, detect_in_slices
from rooflab.reports.regressions.verdicts import Verdict
from rooflab.vocab import SeriesBy

HISTORY_SLACK_RUNS = 10
SERIES_PART_CASES = 200  # cases whose whole history is read at a time for the series read again in full
TAIL_PART_ROWS = 250_000  # results of the newest runs read and judged at a time (whole series each)


def history_runs(window: int) -> int:
    """How many of the newest runs `detect_in_database` reads first: the newest two points, the
    shifted tail `judge` may set aside (up to window // 2) and the window itself, or the
    CHANGE_HISTORY points of the change-point pass when more; and some slack."""
    return max(window + max(1, window // 2) + 2, CHANGE_HISTORY) + HISTORY_SLACK_RUNS

def recent_runs(run_ids: Sequence[str], devices: pd.DataFrame, runs_each: int) -> list[str]:
    """The newest runs that hold the newest `runs_each` runs of every device measured in the newest
    `runs_each` runs (`devices`: run_id, device_key pairs): a series' newest points, whether a night is
    one run of every node (a Slurm night) or a run per node (each node's export imported)."""
    if len(run_ids) <= runs_each:
        return list(run_ids)
    by_run: dict[str, list[str]] = {}
    for run, device in zip(devices["run_id"].astype(str), devices["device_key"].astype(str), strict=True):
        by_run.setdefault(run, []).append(device)
    wanted = {d for run in run_ids[-runs_each:] for d in by_run.get(run, ())}
    seen: dict[str, int] = dict.fromkeys(wanted, 0)
    short = len(wanted)  # devices with fewer than runs_each runs so far
    for i in range(len(run_ids) - 1, -1, -1):
        for device in by_run.get(run_ids[i], ()):
            if device in seen:
                seen[device] += 1
                short -= seen[device] == runs_each
        if short <= 0 and i <= len(run_ids) - runs_each:
            return list(run_ids[i:])
    return list(run_ids)


@dataclass(frozen=True)
class MethodLayout:
    """How a series measured in more than one way lies in run order: `ways` contiguous stretches
    (one segment each), the newest starting at `newest_start_run`."""

    ways: int
    newest_start_run: str


def method_layouts(spans: pd.DataFrame,
                   environments: pd.DataFrame | None = None) -> dict[tuple[str, str], MethodLayout | None]:
    """Per series measured in more than one way (a HistorySource's method spans), or by device in
    more than one environment (its fingerprint spans): its layout when each way's ok runs all come
    before the next way's (in run order, by start time), else None (the ways alternate, or runs
    started at the same instant, or both the way and the environment changed: the whole history
    must be read). A series measured one way in one environment is not listed."""
    out = _layouts(spans)
    for key, layout in (_layouts(environments) if environments is not None else {}).items():
        out[key] = None if key in out else layout
    return out


def _layouts(spans: pd.DataFrame) -> dict[tuple[str, str], MethodLayout | None]:
    """method_layouts of one span frame, worked out on arrays (a fleet's 128,000 series each sorted
    alone took a minute): the spans sorted by series and first start, a series contiguous when each
    of its spans but the last ends before the next one starts."""
    if spans.empty:
        return {}
    size = spans.groupby(["case_key", "series"], sort=False)["first_ok_start"].transform("size").to_numpy()
    multi = spans.loc[size >= 2]
    if multi.empty:
        return {}
    ordered = multi.sort_values(["case_key", "series", "first_ok_start"], kind="stable")
    case, series = ordered["case_key"].to_numpy(dtype=object), ordered["series"].to_numpy(dtype=object)
    first, last = _instants(ordered["first_ok_start"]), _instants(ordered["last_ok_start"])
    head = np.ones(len(ordered), dtype=bool)  # the first span of each series
    head[1:] = (case[1:] != case[:-1]) | (series[1:] != series[:-1])
    group = np.cumsum(head) - 1
    broken = np.zeros(int(group[-1]) + 1, dtype=bool)
    overlaps = ~head[1:] & ~(last[:-1] < first[1:])  # a span that does not end before the next starts
    broken[group[1:][overlaps]] = True
    heads, tails = np.flatnonzero(head), np.flatnonzero(np.append(head[1:], True))
    runs = ordered["first_ok_run"].to_numpy(dtype=object)[tails]
    return {(str(case[h]), str(series[h])): (MethodLayout(int(t - h + 1), str(run))
                                             if not broken[g] and isinstance(run, str) else None)
            for g, (h, t, run) in enumerate(zip(heads, tails, runs, strict=True))}


def _instants(when: pd.Series) -> np.ndarray:
    """Times (aware, or naive UTC) as numpy datetimes, to compare as arrays (numpy compares any units)."""
    return pd.to_datetime(when, utc=True).dt.tz_convert(None).to_numpy()


@dataclass(frozen=True)
class _Seen:
    """What the newest runs held of a series, kept beside its verdict once its points are dropped."""

    points: int  # its points in the newest runs
    suffices: bool  # gate.window_suffices on them
    segments: int  # its segments among them

    @classmethod
    def of(cls, v: SeriesVerdict, window: int) -> _Seen:
        return cls(len(v.points), window_suffices(v.points, window), v.points[-1].segment + 1 if v.points else 0)


def _lean(v: SeriesVerdict) -> SeriesVerdict:
    """`v` without its points where nothing after the check reads them: a series it did not flag, but
    a collective's (the two-run check compares its newest points; reports.regressions.link_check)."""
    return v if v.flagged or table_of(v.case_key) is not None else replace(v, points=())


def _renumbered(v: SeriesVerdict, offset: int) -> tuple[Point, ...]:
    """`v.points` with their segment numbers moved up by the `offset` segments before the newest runs."""
    if offset == 0:
        return v.points
    return tuple(Point(p.run_id, p.run_order, p.median_ms, p.good, p.excluded_because, p.segment + offset,
                       p.started_at, p.git_commit) for p in v.points)  # dataclasses.replace: 5x slower


class HistorySource(Protocol):
    """Where `detect_with` reads a history from: the database (`DatabaseSource`) or the history's
    columns already read (reports.regressions.columns_source.ColumnsSource). A source keys its
    series by `by` (reports.data.devices): each frame it gives names them in a `series` column."""

    by: SeriesBy

    def run_ids(self) -> list[str]:
        """Every run id, in run order."""
        ...

    def recent(self, runs_each: int) -> list[str]:
        """The newest runs holding the newest `runs_each` runs of each device (`recent_runs`)."""
        ...

    def tail(self, runs: list[str]) -> Iterator[pd.DataFrame]:
        """The DETECT_COLUMNS of every result of `runs`, in parts of whole series (each part the
        results of some case keys, the parts in case-key order), so that a check holds one part at
        a time."""
        ...

    def summary(self) -> pd.DataFrame:
        """db.query.series_summary's frame, with the series named (case_key, series, n_ok_runs, first_ok_run)."""
        ...

    def series(self, keys: set[tuple[str, str]]) -> pd.DataFrame:
        """The DETECT_COLUMNS of every result of the series `keys` (case_key, series)."""
        ...

    def method_spans(self) -> pd.DataFrame:
        """db.query.series_method_spans's frame (the series named): where each way of measuring a
        series starts and ends."""
        ...

    def fingerprint_spans(self) -> pd.DataFrame:
        """db.query.series_fingerprint_spans' frame by device (the series named; empty by model)."""
        ...

    def device_hosts(self, runs: list[str]) -> dict[str, str]:
        """db.query.device_hosts: each device UUID's host in the newest of `runs` ({} when not known)."""
        ...


def named(parts: pd.DataFrame, by: SeriesBy) -> pd.DataFrame:
    """A db.query series frame (case_key, the series' parts, the rest) with its series named in a
    `series` column in place of the parts (reports.data.devices.series_ids)."""
    names = query.series_parts(by == SeriesBy.DEVICE)
    rest = [c for c in parts.columns if c not in names and c != "case_key"]
    out = pd.DataFrame({"case_key": parts["case_key"], "series": series_ids(parts, by)})
    return pd.concat([out, parts[rest]], axis=1)


class DatabaseSource:
    """A history read from the database at `url` through db.query."""

    def __init__(self, url: Db, by: SeriesBy = SeriesBy.DEVICE) -> None:
        self.url = url
        self.by = by
        self._per_device = by == SeriesBy.DEVICE

    def run_ids(self) -> list[str]:
        return query.run_ids(self.url)

    def recent(self, runs_each: int) -> list[str]:
        return recent_runs(self.run_ids(), query.run_devices(self.url), runs_each)

    def tail(self, runs: list[str]) -> Iterator[pd.DataFrame]:
        """The results of `runs` read once as columns (a few bytes a result, each run's results
        together, in the table's order: a part of whole cases at a time would read every heap page
        of the runs again for each part), framed a part at a time (reports.regressions.column_frames)."""
        columns = ColumnFrames(series_query.history_columns(self.url, runs=runs), self.by)
        yield from columns.tail(runs, TAIL_PART_ROWS)

    def summary(self) -> pd.DataFrame:
        return named(query.series_summary(self.url, per_device=self._per_device), self.by)

    def method_spans(self) -> pd.DataFrame:
        return named(query.series_method_spans(self.url, per_device=self._per_device), self.by)

    def fingerprint_spans(self) -> pd.DataFrame:
        if not self._per_device:
            return pd.DataFrame(columns=["case_key", "series", "device_fingerprint", "first_ok_start",
                                         "last_ok_start", "first_ok_run"])
        return named(query.series_fingerprint_spans(self.url), self.by)

    def device_hosts(self, runs: list[str]) -> dict[str, str]:
        return query.device_hosts(self.url, runs) if self._per_device else {}

    def series(self, keys: set[tuple[str, str]], columns: Sequence[str] | None = DETECT_COLUMNS) -> pd.DataFrame:
        """The `columns` (default DETECT_COLUMNS; None: every column) of every result of the series `keys`."""
        parts = []
        for cases, gpus in self._reads(keys):
            for i in range(0, len(cases), SERIES_PART_CASES):  # a few cases' whole history at a time, kept
                history = query.results(self.url, case_key=cases[i:i + SERIES_PART_CASES], device_key=gpus,
                                        columns=columns)
                ids = series_ids(history, self.by)
                parts.append(history[[(k, f) in keys
                                      for k, f in zip(history["case_key"].astype(str), ids, strict=True)]])
        return pd.concat(parts, ignore_index=True) if parts else query.results(self.url, case_key=[],
                                                                                 columns=columns)

    def _reads(self, keys: set[tuple[str, str]]) -> list[tuple[list[str], list[str] | None]]:
        """The reads that hold the series `keys`, as (case keys, device keys or None): by device each
        GPU's own cases (through the device's index: a fleet's flagged series are a few of each case's
        64); by model, or with a device without a UUID among them, the cases whole."""
        if self._per_device:
            by_gpu: dict[str, set[str]] = {}
            for case_key, sid in keys:
                gpu = device_uuid_of(sid)
                if gpu is None:
                    break
                by_gpu.setdefault(gpu, set()).add(case_key)
            else:
                return [(sorted(cases), [gpu]) for gpu, cases in sorted(by_gpu.items())]
        return [(sorted({k for k, _ in keys}), None)]


def device_uuid_of(series: str) -> str | None:
    """The device UUID (the stored device key) of a by-device series id (reports.data.devices.series_id:
    a device key, behind a tool's name for another tool's series); None for a device without a UUID
    (keyed by host and name, which the stored key does not hold)."""
    key = series.split(TOOL_SEPARATOR, 1)[1] if TOOL_SEPARATOR in series else series
    return None if HOST_SEPARATOR in key else key


def detect_in_database(url: Db, window: int = WINDOW, z_threshold: float = Z_THRESHOLD, min_change: float = MIN_CHANGE,
                       *, min_baseline: int = MIN_BASELINE, by: SeriesBy = SeriesBy.DEVICE) -> list[SeriesVerdict]:
    """`detect(db.query.results(url))`, computed from the newest runs instead of the whole history
    (`detect_with` a DatabaseSource), each device's host as its newest run names it."""
    return detect_with(DatabaseSource(url, by), window, z_threshold, min_change, min_baseline=min_baseline)


def detect_with(source: HistorySource, window: int = WINDOW, z_threshold: float = Z_THRESHOLD,
                min_change: float = MIN_CHANGE, *, min_baseline: int = MIN_BASELINE) -> list[SeriesVerdict]:
    """`detect` on every result of the history `source` (its series by `source.by`), computed from
    the newest runs instead.

    Reads the newest runs (a few columns) that hold the newest `history_runs(window)` runs of each
    device (`recent_runs`: a night may be one run or a run per node), judges every series on them, and
    reads the whole history again only of the series that it flags (so their trend plots show it
    all), of those for which those runs do not hold everything `judge` looks at
    (`window_suffices`) and of those without an ok result in them. The segments of a series start
    where its way of measuring (flush method, pace) or, by device, its environment (fingerprint)
    changes: the source's spans say where each way and environment starts and ends
    (`method_layouts`), so that the newest segment's first run and the segment numbers are those of
    the whole history; a series whose ways alternate, or that changed both, is read again in full.
    Verdicts, their `as_dict()` and their order equal those of `detect` on the whole history. Where
    the newest runs are not the whole history, a series that was not read again and is not flagged
    keeps no points (`n_points` counts them: nothing after the check draws them, and on a fleet's
    night they were half its memory), but a collective's, which keeps its newest (the two-run check
    compares them). Each device's host is then the one the source names for it in the newest runs
    (`with_hosts`).
    """
    run_ids = source.run_ids()
    if not run_ids:
        return []
    recent = source.recent(history_runs(window))
    judge_all = partial(detect_in_slices, window=window, z_threshold=z_threshold, min_change=min_change,
                        min_baseline=min_baseline, by=source.by)
    if len(recent) == len(run_ids):
        judged = [v for part in source.tail(recent) for v in judge_all(part)]
        return with_hosts(link_checked(judged, min_change), source.device_hosts(recent))
    by_key: dict[tuple[str, str], SeriesVerdict] = {}
    seen: dict[tuple[str, str], _Seen] = {}
    # the per-series summary is one grouped query over every result: the database works on it
    # (without the GIL) while this thread reads and judges the newest runs
    with ThreadPoolExecutor(max_workers=2) as pool:
        pending = pool.submit(source.summary)
        pending_spans = pool.submit(lambda: (source.method_spans(), source.fingerprint_spans()))
        # a part of the newest runs at a time: a year-scale history's newest runs are gigabytes as one frame
        for part in source.tail(recent):
            for verdict in judge_all(part):
                seen[verdict.key] = _Seen.of(verdict, window)
                by_key[verdict.key] = _lean(verdict)
        summary = pending.result()
        layouts = method_layouts(*pending_spans.result())
    totals = {(k, f): (n, first) for k, f, n, first in summary.itertuples(index=False)}
    again: set[tuple[str, str]] = set()
    for key, (n_total, first_run) in totals.items():
        v = by_key.get(key)
        if v is None:
            again.add(key)  # no result at all in the newest runs
            continue
        held = seen[key]
        if held.points == n_total and not v.flagged:
            if len(v.points) != n_total:  # the whole series was read, and its points dropped
                by_key[key] = replace(v, n_points=n_total)
        elif v.flagged or not held.suffices:
            again.add(key)
        elif key in layouts and layouts[key] is None:
            again.add(key)  # its ways of measuring alternate: its segments need the whole history
        else:
            layout = layouts.get(key)
            earlier = (layout.ways if layout else 1) - held.segments  # segments wholly before the newest runs
            if earlier and v.status == Verdict.INSUFFICIENT_DATA:
                again.add(key)  # its note says whether the series had a segment before the newest
                continue
            start = (v.segment_start_run if held.segments > 1 else layout.newest_start_run if layout
                     else first_run)
            by_key[key] = replace(v, n_points=n_total, segment_start_run=start, points=_renumbered(v, earlier))
    if again:
        for v in judge_all(source.series(again)):
            by_key[v.key] = v
    verdicts = link_checked([by_key[key] for key in sorted(by_key)], min_change)
    return with_hosts(verdicts, source.device_hosts(recent))


def with_hosts(verdicts: list[SeriesVerdict], hosts: Mapping[str, str]) -> list[SeriesVerdict]:
    """`verdicts`, each device's host the one `hosts` names for its UUID (db.query.device_hosts: the
    node its newest run records for it, where a run spans several nodes and names one host)."""
    if not hosts:
        return verdicts
    return [replace(v, host=hosts[v.device_key]) if v.device_key is not None and v.device_key in hosts else v
            for v in verdicts]


def load_verdicts(url: Db, options: RegressionOptions = RegressionOptions()) -> list[SeriesVerdict]:
    """The regression verdict of every series in the database at `url`, as `detect` gives them on
    every result, read from the newest runs (detect_in_database); [] when nothing has been stored
    there yet."""
    if nothing_stored(url):
        return []
    return detect_in_database(url, **options.as_kwargs())
