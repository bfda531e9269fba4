"""reports.regressions.history_points and reports.pages.history_page: the history's points framed as
the gate frames them, read from a database as from a frame, and written compactly into the page."""
from __future__ import annotations

import base64
import json
import math

import numpy as np
import pandas as pd
import pytest

from rooflab.db.query import result_counts, results
from rooflab.db.series_query import history_columns
from rooflab.reports.data.run_counts import case_runs_of, counts_from_history, newest_ok_runs
from rooflab.reports.pages.history_page import LOG_STEP, history_pages
from rooflab.reports.pages.slugs import slug
from rooflab.reports.regressions.history_points import history_of_frame, series_points
from rooflab.reports.regressions.series import detect, run_points
from rooflab.reports.regressions.series import series_points as gate_points
from tests.reports.gen_history import nightly_history, planted_keys
from tests.reports.synth import write_db

EVIL = "<script>alert('x')</script>"


def _awkward() -> pd.DataFrame:
    """A nightly history with what the framing must get right: two GPUs of one fingerprint in a
    run (one of them failed once), a throttled night, a stored noisy result, an old result judged
    noisy by the rule (no stored quality), runs without an ok result, a string that must not break
    out of the page."""
    frame = nightly_history(nights=12, cases=6, devices=2)
    first = frame["device_fingerprint"] == "fp-0"
    twin = frame[first].copy()
    twin["device_uuid"] = "GPU-1"
    twin["median_ms"] *= 1.02
    twin.loc[twin["run_id"] == "nightly-003", "status"] = "failed"
    twin.loc[twin["run_id"] == "nightly-003", "median_ms"] = None
    frame = pd.concat([frame, twin], ignore_index=True)
    frame.loc[(frame["run_id"] == "nightly-005") & first, "quality"] = "noisy"
    old = (frame["run_id"] == "nightly-007") & ~first
    frame.loc[old, ["quality", "stop_reason", "rel_ci_halfwidth"]] = [None, "max_time", 0.2]
    gone = (frame["run_id"] == "nightly-009") & (frame["op"] == "add")
    frame.loc[gone, ["status", "median_ms"]] = ["crashed", None]
    frame.loc[(frame["run_id"] == "nightly-004") & ~first & (frame["op"] == "scale"), "throttled"] = True
    frame.loc[frame["op"] == "gelu", "host"] = EVIL
    return frame


def _as_gate(frame: pd.DataFrame) -> dict[tuple[str, str], list[tuple[str, float, str]]]:
    points = run_points(frame)
    out = {}
    for (key, device), rows in points.groupby(["case_key", "series"]):
        out[(key, device)] = [(p.run_id, p.median_ms, p.excluded_because or "") for p in gate_points(rows)]
    return out


def _as_history(h) -> dict[tuple[str, str], list[tuple[str, float, str]]]:
    from rooflab.reports.regressions.history_points import EXCLUDED

    pts = h.points
    keys = h.tables.cases.set_index("case_id")["case_key"]
    runs = h.tables.runs["run_id"].to_numpy()
    out = {}
    for i in range(pts.n_series):
        s = pts.of(i)
        out[(keys[pts.case_id[i]], pts.devices.ids[pts.device[i]])] = [
            (runs[r], float(m), EXCLUDED[x]) for r, m, x in zip(pts.run_index[s], pts.median_ms[s], pts.excluded[s],
                                                                strict=True)]
    return out


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert [(r, x) for r, _, x in a[key]] == [(r, x) for r, _, x in b[key]], key
        assert np.allclose([m for _, m, _ in a[key]], [m for _, m, _ in b[key]], rtol=1e-6), key


def test_the_history_frames_its_points_as_the_gate_does():
    frame = _awkward()
    gate, mine = _as_gate(frame), _as_history(history_of_frame(frame))
    _same(gate, mine)
    excluded = {x for points in mine.values() for _, _, x in points}
    assert excluded == {"", "not ok", "throttled", "noisy"}  # every reason was planted and found


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('history') / 'results.db'}"
    write_db(url, _awkward().to_dict("records"))
    return url


def test_the_database_read_gives_the_frame_read_and_the_run_counts(stored):
    columns = history_columns(stored)
    from rooflab.reports.regressions.history_points import HistoryData

    from_db = HistoryData(columns.tables_only(), series_points(columns))
    _same(_as_history(history_of_frame(results(stored))), _as_history(from_db))
    by = ["run_id", "device_name", "device_fingerprint", "op", "family", "status"]
    mine = counts_from_history(columns).sort_values(by).reset_index(drop=True)
    theirs = result_counts(stored).sort_values(by).reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, theirs, check_dtype=False)
    cols = ["device_name", "case_key", "suite", "run_id"]
    every = case_runs_of(results(stored))
    newest = every.sort_values("run_order").drop_duplicates(["device_name", "case_key", "suite"], keep="last")
    expected = newest.sort_values(cols)[cols].reset_index(drop=True)
    assert newest_ok_runs(columns).sort_values(cols)[cols].reset_index(drop=True).equals(expected)
    named = newest_ok_runs(columns, named={"nightly-003"})  # a run named keeps every ok case of its own
    assert set(named.loc[named["run_id"] == "nightly-003", "case_key"]) == set(
        every.loc[every["run_id"] == "nightly-003", "case_key"])
    keys = history_columns(stored, keys_only=True)  # what the report's main process reads
    assert len(keys.p10_ms) == 0 and set(np.unique(keys.median_ms[~np.isnan(keys.median_ms)])) == {1.0}
    pd.testing.assert_frame_equal(counts_from_history(keys).sort_values(by).reset_index(drop=True), theirs,
                                  check_dtype=False)
    assert newest_ok_runs(keys).sort_values(cols)[cols].reset_index(drop=True).equals(expected)


def _decode(data: dict, name: str, dtype) -> np.ndarray:
    return np.frombuffer(base64.b64decode(data["pts"][name]), dtype=dtype)


def test_the_page_data_is_compact_and_round_trips():
    frame = nightly_history(nights=40, cases=12, devices=2)
    history, verdicts = history_of_frame(frame), detect(frame)
    (page,) = history_pages(history.tables, history.points, verdicts, slug=slug)
    assert "<" not in page.data_json  # it sits inside a <script> element
    data = json.loads(page.data_json)
    series, start = data["series"], _decode(data, "start", np.uint32)
    med, lo, hi = _decode(data, "med", np.float32), _decode(data, "lo", np.uint16), _decode(data, "hi", np.uint16)
    run = _decode(data, "run", np.uint32)
    assert len(series["key"]) == 24 and start[-1] == len(med) == 40 * 24
    by_key = {v.key: v for v in verdicts}
    for i, key in enumerate(series["key"]):
        device = data["devs"][series["dv"][i]]
        assert device["host"] == "node1" and device["id"] == device["key"]
        rows = frame[(frame["case_key"] == key) & (frame["device_uuid"] == device["key"])].sort_values("run_order")
        s = slice(start[i], start[i + 1])
        assert [data["runs"]["id"][r] for r in run[s]] == rows["run_id"].tolist()
        assert np.allclose(med[s], rows["median_ms"], rtol=1e-6)
        assert np.allclose(med[s] * np.exp(-lo[s].astype(float) / LOG_STEP), rows["p10_ms"], rtol=1e-3)
        assert np.allclose(med[s] * np.exp(hi[s] / LOG_STEP), rows["p90_ms"], rtol=1e-3)
        v = by_key[(key, device["key"])]
        assert data["verdicts"][series["v"][i]] == v.status
        assert series["c"][i] == (None if v.latest is None else pytest.approx(v.latest.rel_change, abs=1e-5))
    step = series["key"].index(planted_keys(frame)["step"])
    assert data["verdicts"][series["v"][step]] == "regression"
    assert [data["runs"]["id"][r] for r in series["fl"][step]] == ["nightly-038", "nightly-039"]
    assert [data["runs"]["id"][c[0]] for c in series["cp"][step]] == ["nightly-034"]
    assert math.isclose(series["cp"][step][0][1], 0.12, abs_tol=0.03)
    # about 15 bytes a point: base64 of four bytes of median, two of each band end and of flags and run
    assert len(page.data_json) < 16 * 40 * 24 + 12_000
