"""The supervisor with real worker processes on the CPU: planted faults, each recorded, the sweep going on."""
from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rooflab.db.query import results
from rooflab.db.store import ResultStore
from rooflab.record import RunRecord
from rooflab.runners.orchestration.processes import describe_exit
from rooflab.runners.orchestration.supervisor import Supervisor, default_case_timeout_s
from rooflab.suite.case import Case
from rooflab.suite.timing import TimingSettings

PLUGIN = "tests.runners.planted_ops"
FAST = TimingSettings(warmup_ms=1.0, warmup_calls=2, min_samples=5, max_samples=200, min_time_ms=2.0, max_time_ms=50.0)


def planted(op: str, n: int = 4096) -> Case:
    return Case(
        op=op, op_version=1, family="pointwise", backend="eager", dtype="float32", cache="hot",
        timing_mode="launch", params={"n": n, "sleep_ms": 0.0}, benchmark="planted", timing=FAST,
    )


class Recorder:
    """A Progress that keeps what it was told."""

    def __init__(self) -> None:
        self.ready: list[tuple[str, int, int]] = []
        self.started: list[str] = []
        self.done: list[tuple[str, str]] = []
        self.notes: list[str] = []
        self.dropped: list[tuple[int, int]] = []
        self.added = 0

    def lane_ready(self, lane: str, device_name: str, pending: int, already_measured: int) -> None:
        self.ready.append((lane, pending, already_measured))

    def cases_dropped(self, lane: str, dropped: int, pending: int) -> None:
        self.dropped.append((dropped, pending))

    def cases_added(self, lane: str, added: int) -> None:
        self.added += added

    def case_started(self, lane: str, case: Case) -> None:
        self.started.append(case.case_key)

    def case_done(self, lane: str, case: Case, record, elapsed_s: float) -> None:
        self.done.append((case.case_key, record.status))

    def note(self, text: str) -> None:
        self.notes.append(text)


def new_run(url: str, run_id: str) -> ResultStore:
    store = ResultStore(url)
    store.start_run(
        RunRecord(
            run_id=run_id, suite="planted", spec_text="name: planted", spec_hash="0" * 64,
            started_at=datetime.now(UTC), host="test", command_line="pytest",
        )
    )
    return store


@pytest.fixture
def db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)
    return f"sqlite:///{tmp_path / 'results.db'}"


def test_planted_faults_are_recorded_and_the_sweep_goes_on(db_url: str) -> None:
    cases = [
        planted("planted_scale", 1024),
        planted("planted_raise"),
        planted("planted_exit"),
        planted("planted_scale", 2048),  # measured by a fresh worker after os._exit
        planted("planted_wrong"),
        planted("planted_segv"),
        planted("planted_huge"),
        planted("planted_hang"),
        planted("planted_scale", 4096),  # measured by a fresh worker after the timeout
    ]
    store = new_run(db_url, "faults")
    progress = Recorder()
    result = Supervisor(
        store=store, run_id="faults", torch_devices=["cpu"], cases=cases, progress=progress,
        case_timeout_s=4.0, handle_signals=False,
    ).run()
    store.close()
    assert result.status == "complete"
    assert result.unmeasured == 0
    assert [status for _, status in progress.done] == [
        "ok", "failed", "crashed", "ok", "incorrect", "crashed", "skipped", "crashed", "ok",
    ]
    df = results(db_url, run_id="faults").set_index("case_key")
    assert len(df) == len(cases)
    rows = {c.op + str(c.params["n"]): df.loc[c.case_key] for c in cases}
    assert rows["planted_raise4096"]["error"] == "RuntimeError: planted failure in the timed call"
    assert rows["planted_exit4096"]["error"] == "worker process died: exit code 3"
    assert "SIGSEGV" in rows["planted_segv4096"]["error"]
    assert rows["planted_hang4096"]["error"].startswith("timed out after 4.")
    assert rows["planted_huge4096"]["error"].startswith("would not fit")
    assert "max abs error" in rows["planted_wrong4096"]["error"]
    for key in ("planted_scale1024", "planted_scale2048", "planted_scale4096"):
        assert rows[key]["status"] == "ok"
        assert rows[key]["median_ms"] > 0 and rows[key]["n_samples"] >= FAST.min_samples
    for key in ("planted_raise4096", "planted_exit4096", "planted_wrong4096", "planted_segv4096", "planted_hang4096"):
        assert pd_isnull(rows[key]["median_ms"])
        # the work model is stored whatever the status, so a failed case still shows its size
        assert rows[key]["flops"] == 4096 and rows[key]["bytes"] == 8 * 4096
    assert sum("fresh worker" in note or "timed out" in note for note in progress.notes) >= 3


def test_second_pass_over_a_run_measures_nothing_again(db_url: str) -> None:
    cases = [planted("planted_scale", 256), planted("planted_scale", 512)]
    store = new_run(db_url, "twice")
    first = Supervisor(store=store, run_id="twice", torch_devices=["cpu"], cases=cases[:1], progress=Recorder(),
                       handle_signals=False).run()
    progress = Recorder()
    second = Supervisor(store=store, run_id="twice", torch_devices=["cpu"], cases=cases, progress=progress,
                        handle_signals=False).run()
    store.close()
    assert first.status == second.status == "complete"
    assert progress.ready == [("cpu", 1, 1)]
    assert progress.started == [cases[1].case_key]
    df = results(db_url, run_id="twice")
    assert sorted(df["case_key"]) == sorted(c.case_key for c in cases)


def test_cases_another_process_stored_meanwhile_are_not_measured(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import rooflab.runners.orchestration.supervisor as supervisor

    monkeypatch.setattr(supervisor, "REFRESH_MEASURED_S", 0.0)
    cases = [planted("planted_scale", n) for n in (128, 256, 512)]
    store = new_run(db_url, "twin")

    class TwinStore:
        """The real store; right after the first result, a twin process stores the last case."""

        def __init__(self) -> None:
            self.twin_done = False

        def __getattr__(self, name: str):
            return getattr(store, name)

        def add_measurements(self, records):
            (m,) = records
            added = store.add_measurements(records)
            if not self.twin_done:
                self.twin_done = True
                twin = ResultStore(db_url)
                last = cases[-1]
                case = dataclasses.replace(m.identity.case, case_key=last.case_key, params=dict(last.params))
                assert twin.add_measurement(dataclasses.replace(m, identity=dataclasses.replace(m.identity, case=case)))
                twin.close()
            return added

    progress = Recorder()
    result = Supervisor(
        store=TwinStore(), run_id="twin", torch_devices=["cpu"], cases=cases, progress=progress, handle_signals=False
    ).run()
    store.close()
    assert result.status == "complete"
    assert progress.dropped == [(1, 1)]
    assert progress.started == [cases[0].case_key, cases[1].case_key]
    frame = results(db_url, run_id="twin")
    assert len(frame) == 3 and frame["case_key"].is_unique


def test_exit_descriptions() -> None:
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-11) == "signal SIGSEGV (-11)"
    assert describe_exit(-9) == "signal SIGKILL (-9)"


def test_case_timeout_grows_with_the_case_budget_and_compile() -> None:
    short = default_case_timeout_s(FAST, "eager")
    long = default_case_timeout_s(TimingSettings(max_time_ms=60_000), "eager")
    compiled = default_case_timeout_s(FAST, "compiled")
    assert short < long and short < compiled
    assert long >= 3 * 60.0


def pd_isnull(value: object) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def test_each_result_is_written_before_its_lane_gets_the_next_case_and_one_stored_meanwhile_is_kept(
        db_url: str) -> None:
    """No result waits for a batch: the supervisor writes what it received before it sends the lane its
    next case (a killed run loses only the case in flight); a result that another process stored
    meanwhile is not written again, and said so."""
    sizes = random.sample(range(64, 4096), 5)
    cases = [planted("planted_scale", n) for n in sizes]
    store = new_run(db_url, "each")
    events: list[tuple[str, str]] = []  # ("sent" | "written", case_key), in order

    class Progress(Recorder):
        def case_started(self, device, case):
            events.append(("sent", case.case_key))
            super().case_started(device, case)

    class Counting:
        def __getattr__(self, name: str):
            return getattr(store, name)

        def add_measurements(self, records):
            keys = [m.identity.case.case_key for m in records]
            if keys == [cases[1].case_key]:  # another process stores the second case first
                twin = ResultStore(db_url)
                assert twin.add_measurement(records[0])
                twin.close()
            events.extend(("written", key) for key in keys)
            return store.add_measurements(records)

    progress = Progress()
    result = Supervisor(store=Counting(), run_id="each", torch_devices=["cpu"], cases=cases, progress=progress,
                        handle_signals=False).run()
    store.close()
    assert result.status == "complete"
    assert events == [(kind, c.case_key) for c in cases for kind in ("sent", "written")]
    assert [r.stored for r in result.results] == [True, False, True, True, True]
    assert any(cases[1].describe() in note and "stored meanwhile" in note for note in progress.notes)
    frame = results(db_url, run_id="each")
    assert sorted(frame["case_key"]) == sorted(c.case_key for c in cases)
