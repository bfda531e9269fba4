"""detect_in_database (the newest runs first, whole histories only where needed) against `detect` on
every result, and db.query.series_summary against the results frame, on a synthetic database."""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from rooflab.db import query
from rooflab.reports.regressions import database_check
from rooflab.reports.regressions.database_check import DatabaseSource, detect_in_database, history_runs, load_verdicts
from rooflab.reports.regressions.link_check import table_of
from rooflab.reports.regressions.series import detect
from rooflab.vocab import SeriesBy
from tests.db.pg import BACKENDS, backend_url
from tests.reports.synth import collective, row, write_db

RUNS = 90


def _series(rows: list, values: dict[int, float | None], *, n: int, fingerprint: str | Callable[[int], str] = "fp-h100",
            device_name: str = "NVIDIA H100 80GB HBM3", device_uuid: str | None = "GPU-0", **per_run) -> None:
    """A series of case stream_triad(n) on one GPU: run order -> median (None: failed); its
    fingerprint, and any row field given as a function, by run order."""
    tool = per_run.pop("tool", None)  # a column synth.row does not take
    for order, value in values.items():
        extra = {k: v(order) for k, v in per_run.items()}
        rows.append(row(op="stream_triad", family="probe", params={"n": n}, median_ms=1.0 if value is None else value,
                        flops=2 * n, nbytes=12 * n, run_id=f"run-{order:04d}", run_order=order,
                        fingerprint=fingerprint(order) if callable(fingerprint) else fingerprint,
                        device_name=device_name,
                        status="failed" if value is None else "ok", **extra))
        rows[-1]["device_uuid"] = device_uuid
        if tool is not None:
            rows[-1]["tool"] = tool(order)


def _noise(seed: int, level: float = 1.0, rel: float = 0.01) -> list[float]:
    return list(level * (1 + rel * np.random.default_rng(seed).standard_normal(RUNS)))


@pytest.fixture(scope="module", params=BACKENDS)
def url(request, tmp_path_factory) -> Iterator[str]:
    """The synthetic history in SQLite, and in PostgreSQL (skipped without a server)."""
    with backend_url(request.param, tmp_path_factory.mktemp("regdb")) as url:
        write_db(url, _rows())
        yield url


@pytest.fixture(scope="module")
def everything(url: str) -> pd.DataFrame:
    """Every result of the database (query.results), read once for the tests that judge or count it
    whole (the reference the windowed reads are checked against)."""
    return query.results(url)


@pytest.fixture(scope="module")
def windowed(url: str) -> Callable[..., list]:
    """detect_in_database(url, **kw), judged once per set of options for the module's tests (no test
    writes to the database, and the check only reads it)."""
    return functools.cache(functools.partial(detect_in_database, url))


@pytest.fixture(scope="module")
def verdicts(url: str) -> list:
    """load_verdicts(url), read once for the tests of the planted series."""
    return load_verdicts(url)


def _rows() -> list[dict]:
    rows: list[dict] = []
    orders = range(1, RUNS + 1)
    _series(rows, dict(zip(orders, _noise(1), strict=True)), n=1)  # stable: ok
    step = _noise(2)
    step[-2:] = [v * 1.2 for v in step[-2:]]
    _series(rows, dict(zip(orders, step, strict=True)), n=2)  # regression
    spike = _noise(3)
    spike[-1] *= 1.3
    _series(rows, dict(zip(orders, spike, strict=True)), n=3)  # suspect
    faster = _noise(4)
    faster[-2:] = [v * 0.7 for v in faster[-2:]]
    _series(rows, dict(zip(orders, faster, strict=True)), n=4)  # improvement, on two devices
    _series(rows, dict(zip(orders, faster, strict=True)), n=4, fingerprint="fp-a100",
            device_name="NVIDIA A100-SXM4-80GB",
            device_uuid="GPU-A100")
    _series(rows, {o: v for o, v in zip(orders, _noise(5), strict=True) if o % 7 == 0},
            n=5)  # weekly: few points per run window
    _series(rows, dict(zip(orders, _noise(6), strict=True)),
            n=6,  # recent points throttled: too few good points in the window
            throttled=lambda o: RUNS - 40 < o < RUNS - 1)
    _series(rows, dict(zip(orders, _noise(7), strict=True)), n=7,  # some noisy points and some failed runs
            rel_ci_halfwidth=lambda o: 0.2 if o % 5 == 0 else 0.005)
    for r in rows[-RUNS:]:
        if int(r["run_id"][4:]) % 9 == 0:
            r.update(status="failed", median_ms=None, error="boom")
    _series(rows, dict(zip(range(1, 16), _noise(8), strict=False)), n=8)  # only in old runs
    _series(rows, {o: None for o in range(1, 12)}, n=9)  # never ok, old runs only
    _series(rows, {o: None for o in range(RUNS - 5, RUNS + 1)}, n=10)  # never ok, recent runs
    _series(rows, {o: (None if o == 3 else v) for o, v in zip(range(3, RUNS + 1), _noise(11), strict=False)},
            n=11)  # starts at a tie
    _series(rows, dict(zip(range(3, RUNS + 1), _noise(13), strict=False)), n=13)  # ok in both tied runs
    # the flush method changed long before the newest runs, with a 6 % step: one segment in them
    _series(rows, dict(zip(orders, _noise(14), strict=True)), n=14,
            flush_method=lambda o: "read_sweep" if o < 15 else "write_sweep")
    for r in rows[-RUNS:]:
        if int(r["run_id"][4:]) < 15:
            r["median_ms"] /= 1.06
    # ways that alternate (read, write for two nights, read again), and a 6 % step on the newest two
    # nights, which changed method
    _series(rows, dict(zip(orders, _noise(15), strict=True)), n=15,
            flush_method=lambda o: "write_sweep" if o in (10, 11) else "read_sweep")
    changed = _noise(16)
    changed[-2:] = [v * 1.06 for v in changed[-2:]]
    _series(rows, dict(zip(orders, changed, strict=True)), n=16,
            flush_method=lambda o: "write_sweep" if o > RUNS - 2 else "read_sweep")
    # by device, a driver update is a segment of the GPU's series: long before the newest runs (n=17),
    # on the newest two nights with a 6 % step (n=18), and with a change of flush method too (n=19)
    def fingerprint(o: int) -> str:
        return "fp-h100-560" if o >= 20 else "fp-h100"

    def driver(o: int) -> str:
        return "560.35" if o >= 20 else "550.54"

    _series(rows, dict(zip(orders, _noise(17), strict=True)), n=17, fingerprint=fingerprint, driver_version=driver)
    newest = _noise(18)
    newest[-2:] = [v * 1.06 for v in newest[-2:]]
    _series(rows, dict(zip(orders, newest, strict=True)), n=18,
            fingerprint=lambda o: "fp-h100-560" if o > RUNS - 2 else "fp-h100",
            driver_version=lambda o: "560.35" if o > RUNS - 2 else "550.54")
    _series(rows, dict(zip(orders, _noise(19), strict=True)), n=19, fingerprint=fingerprint, driver_version=driver,
            flush_method=lambda o: "read_sweep" if o < 40 else "write_sweep")
    # a device without a UUID (a whole CPU: its host and model) on two hosts, node2's in runs of its own
    # an hour after the night's, and another tool's results on GPU-0 (an nvbench import): series of their own
    for host in ("node1", "node2"):
        _series(rows, {o: v for o, v in zip(orders, _noise(20), strict=True) if (o <= 10) == (host == "node2")},
                n=20, fingerprint="fp-cpu", device_name="AMD EPYC 9654", device_uuid=None,
                host=lambda o, host=host: host)
    for r in rows:
        if r["host"] == "node2":
            r.update(run_id=r["run_id"].replace("run-", "cpu2-"), started_at=r["started_at"] + timedelta(hours=1),
                     measured_at=r["measured_at"] + timedelta(hours=1))
    _series(rows, dict(zip(range(1, 11), _noise(21), strict=False)), n=1, tool=lambda o: "nvbench",
            fingerprint="fp-h100-nvbench")  # an imported file is a run of its own
    for r in rows:
        if r.get("tool") == "nvbench":
            r.update(run_id=r["run_id"].replace("run-", "nvb-"), started_at=r["started_at"] + timedelta(hours=2),
                     measured_at=r["measured_at"] + timedelta(hours=2))
    two_gpus = [dict(r) for r in rows if r["case_key"] == rows[0]["case_key"] and r.get("tool") != "nvbench"]
    # a second GPU of the same fingerprint
    for r, v in zip(two_gpus, _noise(12), strict=True):
        r.update(device_uuid="GPU-1", median_ms=v)
    rows += two_gpus
    for r in rows:  # run-0004 starts at the same instant as run-0003
        if r["run_id"] == "run-0004":
            r["started_at"] = r["measured_at"] = r["started_at"].replace(day=r["started_at"].day - 1)
    return rows


def _same(windowed: Callable[..., list], everything: pd.DataFrame, **kw) -> list:
    full = detect(everything, **kw)
    found = windowed(**kw)
    assert [v.as_dict() for v in found] == [v.as_dict() for v in full]
    for a, b in zip(found, full, strict=True):
        assert ((a.status, a.latest, a.previous, a.baseline, a.note)
                == (b.status, b.latest, b.previous, b.baseline, b.note))
        if a.status in ("regression", "suspect", "improvement") or a.n_points is None:
            assert a.points == b.points
        elif a.points:  # a collective's newest points, their segments numbered as in the whole history
            assert table_of(a.case_key) is not None
            assert a.points == b.points[-len(a.points):] and a.n_points == len(b.points)
        else:  # judged from the newest runs, not flagged: its points are not kept
            assert not a.flagged and table_of(a.case_key) is None and a.n_points == len(b.points)
    return found


@pytest.mark.parametrize("kw", [{}, {"window": 6}, {"window": 8, "z_threshold": 3.0, "min_change": 0.02},
                                {"window": 3}, {"window": 30}, {"by": SeriesBy.MODEL},
                                {"by": SeriesBy.MODEL, "window": 6}])
def test_windowed_verdicts_equal_those_on_every_result(windowed, everything, kw):
    verdicts = _same(windowed, everything, **kw)
    window = kw.get("window", 20)
    if history_runs(window) < RUNS:  # the newest runs alone were read for some series
        assert any(v.n_points is not None for v in verdicts)
    statuses = Counter(v.status for v in verdicts)
    if window >= 6:
        assert {"regression", "suspect", "improvement", "ok", "insufficient_data"} <= set(statuses), statuses


def _in_order(parts: list[pd.DataFrame]) -> list[list[str]]:
    """The parts' case keys, sorted across the parts (each part its own keys, in the same order)."""
    keys = sorted(k for p in parts for k in set(p["case_key"]))
    out, i = [], 0
    for p in parts:
        n = len(set(p["case_key"]))
        out.append(keys[i:i + n])
        i += n
    return out


@pytest.mark.parametrize("kw", [{"window": 6}, {"by": SeriesBy.MODEL, "window": 30}])
def test_the_newest_runs_read_in_parts_of_a_few_series_give_the_same_verdicts(
        url, everything, kw, monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest runs are read and judged a part at a time (a few case keys each: here a fifth of the
    results a part): the verdicts and their order are those of every result at once."""
    monkeypatch.setattr(database_check, "TAIL_PART_ROWS", len(everything) // 5)
    parts = list(database_check.DatabaseSource(url, kw.get("by", SeriesBy.DEVICE)).tail(query.run_ids(url)))
    assert len(parts) > 3 and sum(len(p) for p in parts) == len(everything)
    assert all(set(a["case_key"]).isdisjoint(b["case_key"]) for a, b in zip(parts, parts[1:], strict=False))
    read = _same(functools.partial(detect_in_database, url), everything, **kw)
    # the report's path: the parts made from the history's columns (ColumnsSource), and those the
    # report keeps of the newest runs (ReadSource) before it lets the columns go
    from rooflab.db.series_query import history_columns
    from rooflab.reports.regressions.columns_source import ColumnsSource, ReadSource
    from rooflab.reports.regressions.database_check import detect_with

    by = kw.get("by", SeriesBy.DEVICE)
    h = history_columns(url)
    column_parts = list(ColumnsSource(h, by).tail(query.run_ids(url)))
    for split in (parts, column_parts):  # parts of whole cases, in case-key order
        assert len(split) > 3 and [sorted(set(p["case_key"])) for p in split] == _in_order(split)
    for source in (ColumnsSource(h, by), ReadSource(h, kw.get("window", 20), DatabaseSource(url, by))):
        found = detect_with(source, **{k: v for k, v in kw.items() if k != "by"})  # the source's `by`
        assert [(v.as_dict(), v.points, v.n_points) for v in found] == [(v.as_dict(), v.points, v.n_points)
                                                                          for v in read]


def test_the_planted_series_get_their_verdicts(verdicts):
    by_n = {(v.case_key.split("n=")[-1], v.series): v for v in verdicts}
    assert by_n[("2", "GPU-0")].status == "regression"
    assert by_n[("3", "GPU-0")].status == "suspect"
    assert by_n[("4", "GPU-A100")].status == by_n[("4", "GPU-0")].status == "improvement"
    assert by_n[("1", "GPU-0")].status == by_n[("1", "GPU-1")].status == "ok"  # two GPUs of one model: two series
    assert by_n[("1", "GPU-0")].n_points == by_n[("1", "GPU-1")].n_points == RUNS
    assert by_n[("11", "GPU-0")].segment_start_run == "run-0004"
    assert by_n[("13", "GPU-0")].segment_start_run == "run-0003"
    assert by_n[("9", "GPU-0")].status == by_n[("10", "GPU-0")].status == "insufficient_data"
    assert {v.host for v in verdicts} == {"node1", "node2"} and {v.by for v in verdicts} == {"device"}
    cpu = {v.device_key: v for v in verdicts if v.case_key.endswith("n=20")}
    assert set(cpu) == {"node1/AMD EPYC 9654", "node2/AMD EPYC 9654"}  # each host's CPU its own series
    assert cpu["node2/AMD EPYC 9654"].as_dict()["n_points"] == 10
    assert cpu["node1/AMD EPYC 9654"].as_dict()["n_points"] == RUNS - 10
    tools = {v.series: v for v in verdicts if v.case_key.endswith("n=1") and v.device_key == "GPU-0"}
    assert set(tools) == {"GPU-0", "nvbench@GPU-0"}  # a series never joins two tools


def test_a_change_of_flush_method_starts_a_segment_and_raises_no_alert(verdicts):
    by_n = {v.case_key.split("n=")[-1]: v for v in verdicts if v.device_key == "GPU-0"}
    older = by_n["14"]  # changed at run 15, before the newest runs: found from the method spans
    assert older.status == "ok" and older.segment_start_run == "run-0015" and older.n_points == RUNS
    assert by_n["15"].segment_start_run == "run-0012"  # alternating: read again in full
    newest = by_n["16"]  # the newest two nights, 6 % slower, measured the other way
    assert newest.status == "insufficient_data" and newest.segment_start_run == f"run-{RUNS - 1:04d}"
    assert not newest.flagged and not newest.change_points


def test_a_driver_update_is_a_segment_of_the_devices_series(verdicts):
    """By device a new fingerprint (driver 550 -> 560) is a segment of the GPU's series: found from the
    fingerprint spans when it lies before the newest runs (only the newest points were read), a new
    segment without a baseline when it is the newest two nights, and a series that changed both its
    environment and its flush method read again in full."""
    by_n = {v.case_key.split("n=")[-1]: v for v in verdicts if v.device_key == "GPU-0"}
    older = by_n["17"]
    assert older.status == "ok" and older.segment_start_run == "run-0020" and older.n_points == RUNS
    assert len(older.points) < RUNS and older.device_fingerprint == "fp-h100-560"
    newest = by_n["18"]
    assert newest.status == "insufficient_data" and newest.note == "new environment segment"
    assert newest.segment_start_run == f"run-{RUNS - 1:04d}" and not newest.flagged
    both = by_n["19"]
    assert both.segment_start_run == "run-0040" and len(both.points) == RUNS and both.n_points is None
    assert [p.segment for p in both.points][::30] == [0, 1, 2]


def test_by_model_a_driver_update_is_a_new_series(url):
    """The model-level aggregate keys a series by fingerprint, as before series were kept per device."""
    found = detect_in_database(url, by=SeriesBy.MODEL)
    mine = {v.device_fingerprint: v for v in found if v.case_key.endswith("n=17")}
    assert set(mine) == {"fp-h100", "fp-h100-560"} and {v.device_key for v in mine.values()} == {None}
    assert mine["fp-h100"].as_dict()["n_points"] == 19 and mine["fp-h100-560"].as_dict()["n_points"] == RUNS - 19
    two = [v for v in found if v.case_key.endswith("n=1") and v.device_fingerprint == "fp-h100"]  # GPU-0 and 1 folded
    assert len(two) == 1 and two[0].as_dict()["by"] == "model" and two[0].host is None


def test_method_spans_hold_each_way_of_measuring(url):
    spans = query.series_method_spans(url)
    mine = spans[spans["case_key"].str.endswith("n=14") & (spans["device_fingerprint"] == "fp-h100")]
    by_method = mine.set_index("flush_method")
    assert set(by_method.index) == {"read_sweep", "write_sweep"}
    assert by_method.loc["write_sweep", "first_ok_run"] == "run-0015"
    assert by_method.loc["read_sweep", "last_ok_start"] < by_method.loc["write_sweep", "first_ok_start"]
    assert set(mine["pace"]) == {"back_to_back"}


def test_series_summary_counts_the_ok_runs_of_every_series(url, everything):
    frame = everything
    ok = frame[(frame["status"] == "ok") & (frame["median_ms"] > 0)]
    summary = query.series_summary(url).set_index(["case_key", "device_fingerprint"])
    keys = set(zip(frame["case_key"], frame["device_fingerprint"], strict=True))
    assert set(summary.index) == keys
    for key in keys:
        runs = ok[(ok["case_key"] == key[0]) & (ok["device_fingerprint"] == key[1])].sort_values("run_order")
        assert summary.loc[key, "n_ok_runs"] == runs["run_id"].nunique()
        first = summary.loc[key, "first_ok_run"]
        assert first == runs["run_id"].iloc[0] if len(runs) else pd.isna(first)
    assert query.run_ids(url) == list(frame.drop_duplicates("run_id").sort_values("run_order")["run_id"])


def test_results_take_several_case_keys(url, everything):
    frame = everything
    keys = sorted(frame["case_key"].unique())[:3]
    several = query.results(url, case_key=keys)
    assert len(several) == frame["case_key"].isin(keys).sum()
    assert set(several["case_key"]) == set(keys)


@pytest.mark.parametrize("which", [-1, -3])
def test_the_nightly_check_of_a_run_equals_the_check_on_every_result(url, everything, which):
    from rooflab.reports.regressions.nightly_check import check_history, series_of_run
    from rooflab.reports.regressions.options import RegressionOptions

    run_id = query.run_ids(url)[which]
    verdicts = detect(series_of_run(everything, run_id), window=8)
    judged = [v.as_dict() for v in verdicts if v.latest is not None and v.latest.run_id == run_id]
    found = check_history(url, run_id, RegressionOptions(window=8))
    by_kind, checked, insufficient, counts = found.verdicts, found.series_checked, found.insufficient_data, found.counts
    assert checked == len(verdicts) and insufficient == sum(v.status == "insufficient_data" for v in verdicts)
    key = lambda d: (d["status"], d["case_key"], d["device_key"])  # noqa: E731 - a named one-line lambda
    assert sorted((d for kind, rows in by_kind.items() if kind != "drift" for d in rows), key=key) == sorted(
        (d for d in judged if d["status"] in ("regression", "suspect", "improvement")), key=key)
    if which == -1:
        assert by_kind["regression"] and by_kind["improvement"]
    frame = query.results(url, run_id=run_id)
    assert counts["ok"] == int((frame["status"] == "ok").sum()) and sum(counts.values()) == len(frame)


@pytest.mark.parametrize("kw", [{}, {"window": 6}, {"window": 3}])
def test_the_verdicts_from_the_history_columns_are_those_read_from_the_database(url, windowed, kw):
    """The report judges from the history it has read (reports.regressions.columns_source): the same verdicts,
    as_dict and points, as detect_in_database reading the database itself."""
    from rooflab.db.series_query import history_columns
    from rooflab.reports.regressions.columns_source import ColumnsSource
    from rooflab.reports.regressions.database_check import detect_with

    read = windowed(**kw)
    columns = detect_with(ColumnsSource(history_columns(url)), **kw)
    assert [v.as_dict() for v in columns] == [v.as_dict() for v in read]
    assert [(v.points, v.n_points) for v in columns] == [(v.points, v.n_points) for v in read]


@pytest.mark.parametrize("by", list(SeriesBy))
def test_the_method_spans_from_the_history_columns_are_those_of_the_database(url, by):
    """The report's column source finds where each way of measuring a series starts and ends as the
    database's grouped query does (the windowed check renumbers segments by them), and by device
    where each environment does."""
    from rooflab.db.series_query import history_columns
    from rooflab.reports.regressions.columns_source import ColumnsSource

    database, columns = DatabaseSource(url, by), ColumnsSource(history_columns(url), by)
    for spans, way in ((DatabaseSource.method_spans, ["flush_method", "pace"]),
                       (DatabaseSource.fingerprint_spans, ["device_fingerprint"])):
        keys = ["case_key", "series", *way]
        want = spans(database).sort_values(keys).reset_index(drop=True)
        got = getattr(columns, spans.__name__)().sort_values(keys).reset_index(drop=True)
        if by == SeriesBy.MODEL and way == ["device_fingerprint"]:
            assert len(want) == len(got) == 0  # by model the fingerprint is the series
            continue
        assert len(want) > 0
        pd.testing.assert_frame_equal(got[keys + ["first_ok_run"]], want[keys + ["first_ok_run"]], check_dtype=False)
        for column in ("first_ok_start", "last_ok_start"):
            assert list(pd.to_datetime(got[column], utc=True)) == list(pd.to_datetime(want[column], utc=True))
    pd.testing.assert_frame_equal(*(f.sort_values(["case_key", "series"]).reset_index(drop=True)
                                    for f in (columns.summary(), database.summary())), check_dtype=False)


def test_an_unflagged_series_keeps_no_points_and_a_collectives_keeps_its_newest_renumbered(tmp_path) -> None:
    """Past the newest runs a series the check did not flag comes back without its points; a
    collective's keeps its newest (the two-run check compares them), their segments numbered as in
    the whole history (a driver update lies before the newest runs)."""
    seed = int(np.random.default_rng().integers(1000))
    update = int(np.random.default_rng(seed).integers(5, RUNS - history_runs(6)))  # before the newest runs

    def env(i: int) -> dict:
        return {"fingerprint": "fp-h100" if i < update else "fp-h100-560",
                "driver_version": "550.54" if i < update else "560.35"}

    rows = []
    for i, (a, b) in enumerate(zip(_noise(seed, 0.5), _noise(seed + 1), strict=True)):
        rows.append(collective("all_reduce", 1024, 2, median_ms=a, dtype="float32", backend="gloo",
                               run_id=f"run-{i + 1:04d}", run_order=i + 1, **env(i)))
        rows.append(row(op="stream_triad", family="probe", params={"n": 4096}, median_ms=b, flops=2 * 4096,
                        nbytes=12 * 4096, run_id=f"run-{i + 1:04d}", run_order=i + 1, **env(i)))
        for r in rows[-2:]:
            r["device_uuid"] = "GPU-0"  # one physical GPU through the update
    assert RUNS > history_runs(6)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    write_db(url, rows)
    full = {v.case_key.split(".")[0]: v for v in detect(query.results(url), window=6)}
    read = {v.case_key.split(".")[0]: v for v in detect_in_database(url, window=6)}
    assert [v.as_dict() for v in read.values()] == [v.as_dict() for v in full.values()]
    triad, reduce = read["stream_triad"], read["all_reduce"]
    assert not triad.flagged and triad.points == () and triad.n_points == len(full["stream_triad"].points)
    assert not reduce.flagged and table_of(reduce.case_key) is not None
    assert 0 < len(reduce.points) < len(full["all_reduce"].points) == reduce.n_points
    assert reduce.points == full["all_reduce"].points[-len(reduce.points):]
    assert {p.segment for p in reduce.points} == {1}  # the update's segment, numbered after the one before
