"""`rooflab crosscheck` on this CPU: the torch peer for real, a planted disagreement, storage, bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.db.crosscheck import crosscheck_frame
from rooflab.runners.cli.app import app
from rooflab.runners.crosscheck.case_check import PeerCheck
from rooflab.runners.crosscheck.peer import PeerClock
from rooflab.runners.crosscheck.session import run_crosscheck
from rooflab.runners.crosscheck.torch_peer import TorchTimerPeer, worker_thread_count
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import CacheMode
from tests.present import present
from tests.runners.fake_proc import busy_others

runner = CliRunner()

# CPU cases of 30-150 ms each on this loaded 2-core machine: long enough that a timer's resolution,
# Python overhead and single lost time slices do not matter. One case of each family (a GEMM, a
# pointwise op, a reduction) in two rounds; each of rooflab's timings takes at least its 6 samples
# (0.2-0.9 s; max_time_ms 250 ends it beyond them), the Timer's own run 200 ms: the timings are the
# test's whole cost, a few seconds of CPU per case and round (rooflab, the peer, rooflab in the
# peer's mode).
# Hot, because the torch peer cannot flush: like is compared with like.
AGREE_SPEC = """
name: crosscheck_agree
description: CPU cases long enough to be stable
defaults:
  dtypes: [float32]
  backends: [eager]
  cache: [hot]
  timing_modes: [launch]
  timing: {warmup_ms: 20, min_samples: 6, min_time_ms: 100, max_time_ms: 250, target_precision: 0.01}
benchmarks:
  - name: gemm
    op: matmul
    devices: [cpu]
    params: {m=n=k: 768}
  - name: pointwise
    op: add
    devices: [cpu]
    params: {n: 8388608}
  - name: reduction
    op: softmax
    devices: [cpu]
    params: {rows: 8192, cols: 1024}
"""

# The agreement band of the geometric-mean ratio rooflab / torch over the three cases above.
# Measured on this machine (2 cores shared by several busy processes, load average 7-11): single
# runs gave geometric means of 0.78 and 0.93, single cases 0.67-0.98 (so the band holds for each
# case alone, and for the geometric mean of any few). Under load rooflab's figure
# is the lower one: torch's block means hold every time slice lost to other processes, the median
# of rooflab's single calls holds the typical call. Cases of 30-150 ms are used because shorter
# ones (a few ms) swing by 3x between rounds here, as whole time slices fall in or out of a call.
# The band [0.6, 1.5] holds under that load and still fails on a factor-of-two error in one
# direction for every case (a ratio inverted, a peer timing two calls per call).
GEOMEAN_BAND = (0.6, 1.5)

PLANTED_SPEC = """
name: crosscheck_planted
description: a callable whose calls are sometimes slow
defaults:
  dtypes: [float32]
  backends: [eager]
  cache: [hot]
  timing_modes: [launch]
  timing: {warmup_ms: 5, min_samples: 40, min_time_ms: 50, max_time_ms: 300, target_precision: 0.05}
benchmarks:
  - name: planted
    op: planted_sometimes_slow
    devices: [cpu]
    params: {n: 4096, sleep_ms: 2.0, every: 4}
"""


def _machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load: float) -> None:
    """Show the contention monitor a machine with `load` threads runnable, none of them a case's
    own, and no /proc/stat."""
    from rooflab.runners.machine import contention

    loadavg = tmp_path / "loadavg"
    loadavg.write_text(f"{load:.2f} {load:.2f} {load:.2f} {round(load)}/100 1\n", encoding="ascii")
    monkeypatch.setattr(contention, "LOADAVG", str(loadavg))
    monkeypatch.setattr(contention, "PROC", str(busy_others(tmp_path / "proc", round(load))))
    monkeypatch.setattr(contention, "PROC_STAT", str(tmp_path / "no-stat"))


@pytest.fixture
def quiet_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agreement and reasons are asserted as on a quiet machine: on a loaded one (load above the
    CPUs, as under `make test` on 2 cores) every row is rightly `contended`, which is tested below."""
    _machine(tmp_path, monkeypatch, 0.0)


def _spec(tmp_path: Path, text: str, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.usefixtures("quiet_machine")
def test_torch_peer_agrees_with_rooflab_on_stable_cpu_cases(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    report = run_crosscheck(_spec(tmp_path, AGREE_SPEC, "agree"), db_url=db, device="cpu", peers="all", rounds=2,
                            command_line="test")
    ok = [c for c in report.checks if c.status == "ok"]
    assert len(ok) == 3 and {c.peer for c in ok} == {"torch"}
    overall = next(s for s in report.summaries if s.peer == "torch" and s.family == "all")
    low, high = GEOMEAN_BAND
    assert overall.ratio_geomean is not None and overall.in_mode_ratio_geomean is not None
    assert low <= overall.ratio_geomean <= high, [(c.case_key, c.ratio) for c in ok]
    assert low <= overall.in_mode_ratio_geomean <= high, [(c.case_key, c.in_mode_ratio) for c in ok]
    for c in ok:
        assert c.peer_cache == "hot" and c.peer_clock == "host_block_mean"
        assert len(c.rooflab_rounds_ms) == 2 and len(c.peer_rounds_ms) == 2 and len(c.in_mode_rounds_ms) == 2
        assert c.rooflab_median_ms is not None and c.peer_median_ms is not None and c.in_mode_median_ms is not None
        assert c.ratio == pytest.approx(c.rooflab_median_ms / c.peer_median_ms)
        assert c.in_mode_ratio == pytest.approx(c.in_mode_median_ms / c.peer_median_ms)
        # hot against hot: the one method difference is what a sample is
        assert c.method_differences == ("sample: per call / block mean",)
        assert (c.peer_mode == "hot, back_to_back, host, block mean"
                and c.rooflab_mode == "hot, back_to_back, host, per call")
    # every row is in the database, linked to the run, the case and the device
    frame = crosscheck_frame(db)
    assert len(frame) == 3 * 4  # three cases x (torch + three GPU peers skipped on a CPU)
    assert set(frame["run_id"]) == {report.run_id}
    torch_rows = frame[frame["peer"] == "torch"]
    assert set(torch_rows["status"]) == {"ok"}
    assert sorted(torch_rows["ratio"]) == pytest.approx(sorted(c.ratio for c in ok if c.ratio is not None))
    assert sorted(torch_rows["in_mode_ratio"]) == pytest.approx(
        sorted(c.in_mode_ratio for c in ok if c.in_mode_ratio is not None))
    assert all(list(d) == ["sample: per call / block mean"] for d in torch_rows["method_differences"])
    skipped = frame[frame["peer"] != "torch"]
    assert set(skipped["status"]) == {"skipped"} and skipped["error"].str.contains("CUDA").all()


@pytest.mark.usefixtures("quiet_machine")
def test_a_method_difference_is_shown_apart_and_the_same_mode_is_close(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One call in four spins for 2 ms: rooflab's per-call median sees the fast calls, torch's block
    means carry a quarter of each sleep. As configured the two differ by far more than their spread
    (the method difference, named); timed in torch's mode (host block means), rooflab agrees up to
    what a loaded machine does to block timings."""
    monkeypatch.setenv("ROOFLAB_PLUGINS", "tests.runners.crosscheck_ops")
    db = f"sqlite:///{tmp_path / 'x.db'}"
    report = run_crosscheck(_spec(tmp_path, PLANTED_SPEC, "planted"), db_url=db, device="cpu", peers="torch",
                            rounds=3, command_line="test")  # a median of three: one round slowed by the
    # other test worker (the in-mode ratio once read 0.44 in two rounds) is outvoted
    (check,) = report.checks
    assert check.status == "ok"
    assert check.peer_median_ms is not None and check.rooflab_median_ms is not None
    assert check.ratio is not None and check.in_mode_ratio is not None
    assert check.peer_median_ms - check.rooflab_median_ms > 0.3  # as configured: a quarter of 2 ms apart
    assert check.method_differences == ("sample: per call / block mean",)
    # in torch's mode: the same figure, up to what a loaded 2-core machine does to 0.2 s block
    # timings taken one after the other (CI's make test read 0.66, its rounds 0.52-1.03 ms: a factor of
    # two between rounds of one timer); as configured, a per-call median a small fraction of the block
    # means (the fast calls: 0.007-0.026 read here), far below that scatter. A planted factor of two in one
    # mode is caught by test_a_peer_off_by_two_disagrees_in_its_own_mode, where every call spins.
    assert 0.5 < check.in_mode_ratio < 2.0 and check.ratio < 0.25 * check.in_mode_ratio
    # no reason is given for a gap (the same mode: no method explains one). The verdict itself is the
    # pure rule's on these figures (tests/runners/test_crosscheck_verdict.py): with the other test
    # worker loading the second core, three rounds' spreads can read below the block means' scatter
    # (a 1.195 in-mode ratio was judged a disagreement under three spinning processes), so it is not
    # asserted here; a planted factor of two is, below
    assert check.likely_reason is None
    assert not check.contended and check.contention_reasons == ()
    row = crosscheck_frame(db).iloc[0]
    assert bool(row["disagrees"]) == check.disagrees and row["in_mode_ratio"] == pytest.approx(check.in_mode_ratio)
    assert row["peer_mode"] == "hot, back_to_back, host, block mean"
    assert not bool(row["contended"]) and list(row["contention_reasons"]) == []


class TwoCallsPerCallPeer(TorchTimerPeer):
    """A planted wrong peer: torch's Timer, but its figure is FACTOR times what it measured."""

    FACTOR = 2

    def time(self, fn, *, case, device, sync):
        t = super().time(fn, case=case, device=device, sync=sync)
        f = self.FACTOR
        return type(t)(f * t.median_ms, tuple(f * x for x in t.samples_ms), t.cache, t.clock)


class TenCallsPerCallPeer(TwoCallsPerCallPeer):
    """Off by ten: a disagreement no load on this machine hides (a factor of two, timed once on a
    loaded machine, read 0.79 with a within-round spread of 46 %: no disagreement)."""

    FACTOR = 10


# `sleepy`: every call spins 3 ms on the clock (tests/runners/crosscheck_ops.py), one thread: its
# time stands while the other test worker loads the second core, where a multi-threaded matmul's
# time moves with that load from one timer's turn to the other's.
ONCE_SPEC = """
name: crosscheck_once
defaults:
  dtypes: [float32]
  backends: [eager]
  cache: [hot]
  timing_modes: [launch]
  timing: {warmup_ms: 5, min_samples: 20, min_time_ms: 50, max_time_ms: 300, target_precision: 0.05}
benchmarks:
  - name: sleepy
    op: planted_sometimes_slow
    devices: [cpu]
    params: {n: 4096, sleep_ms: 3.0, every: 1}
  - name: add
    op: add
    devices: [cpu]
    params: {n: 1048576}
"""


def _hidden_by_its_spread(check: PeerCheck) -> bool:
    """The figures were too noisy to call the gap (the rule's own reason not to): the spread of
    either timer, in ms, at least the gap between them."""
    mine, peer = present(check.in_mode_median_ms), present(check.peer_median_ms)
    gap_ms = abs(mine - peer)
    return max(present(check.in_mode_spread) * mine, present(check.peer_spread) * peer) >= gap_ms


@pytest.mark.usefixtures("quiet_machine")
def test_a_peer_off_by_two_disagrees_in_its_own_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOFLAB_PLUGINS", "tests.runners.crosscheck_ops")

    def measured(name: str) -> PeerCheck:
        report = run_crosscheck(_spec(tmp_path, ONCE_SPEC, name), db_url=f"sqlite:///{tmp_path / f'{name}.db'}",
                                device="cpu", rounds=5, command_line="test", filters=["op=planted_sometimes_slow"],
                                peer_objects=[TwoCallsPerCallPeer()])
        (check,) = report.checks
        return check

    check = measured("once")
    if not check.disagrees and _hidden_by_its_spread(check):
        # A burst of load from the other test worker (4 in about 45 runs of `make test`; once in two
        # measurements in a row, whose in-mode ratio still read 0.50) can widen one timer's spread
        # past the planted gap, and the rule then rightly declines to call it: measured again.
        check = measured("again")
    # 0.5 planted; on a machine the other test worker loads one round alone read 0.30, 0.71 and 0.79
    # (the 3 ms spin timed at 4.8-5.3 ms by one side): the median of five rounds (about 1 s of one
    # core each), in a band that still excludes agreement (1) by a margin
    assert check.in_mode_ratio is not None and 0.25 < check.in_mode_ratio < 0.8
    if not check.disagrees and _hidden_by_its_spread(check):
        pytest.skip(f"too noisy to judge a factor of two twice in a row (spreads: rooflab "
                    f"{check.in_mode_spread:.0%}, peer {check.peer_spread:.0%}); the ratio above was checked")
    assert check.disagrees and check.likely_reason is None  # the same mode: no method explains it


def test_on_a_contended_machine_every_row_says_so_and_the_summary_leaves_them_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load average far above the CPUs while the case is timed: the row is contended with the
    reason, a disagreement (a peer off by ten) is put down to it, the stored row says so, the
    summary has no geometric mean, and the printed table says what was left out. What is asserted is
    the reason given to a disagreement, not that one is seen: off by ten, no noise hides it."""
    import io

    from rich.console import Console

    from rooflab.runners.crosscheck.render import render

    _machine(tmp_path, monkeypatch, 99.0)
    monkeypatch.setenv("ROOFLAB_PLUGINS", "tests.runners.crosscheck_ops")
    db = f"sqlite:///{tmp_path / 'x.db'}"
    report = run_crosscheck(_spec(tmp_path, ONCE_SPEC, "once"), db_url=db, device="cpu", rounds=1, command_line="test",
                            filters=["op=planted_sometimes_slow"], peer_objects=[TenCallsPerCallPeer()])
    (check,) = report.checks
    assert check.status == "ok" and check.contended
    assert len(check.contention_reasons) == 1 and check.contention_reasons[0].startswith("load 99.00 above")
    assert check.disagrees and check.likely_reason == "contended"
    row = crosscheck_frame(db).iloc[0]
    assert bool(row["contended"]) and list(row["contention_reasons"]) == list(check.contention_reasons)
    overall = next(s for s in report.summaries if s.family == "all")
    assert (overall.cases, overall.contended, overall.ratio_geomean, overall.worst_ratio) == (1, 1, None, None)
    out = io.StringIO()
    render(report.to_dict(), Console(file=out, width=200, color_system=None))
    assert "1 of 1 rows were timed on a contended machine (load 99.00 above" in out.getvalue()
    assert "DISAGREE" in out.getvalue()  # its reason text is the one asserted above, wrapped in its cell


def test_torch_peer_runs_with_the_worker_thread_count() -> None:
    import torch

    seen: list[int] = []

    def fn() -> None:
        seen.append(torch.get_num_threads())

    torch.set_num_threads(1)  # the Timer must not keep what the caller happens to have, nor its own default of 1
    try:
        expected = 2
        peer = TorchTimerPeer(min_run_time_s=0.01, num_threads=expected)
        case = Case("add", 1, "pointwise", "eager", "float32", "hot", "launch", {"n": 8})
        device = DeviceInfo("cpu", "cpu", "cpu", 1 << 30, 1 << 20)
        timing = peer.time(fn, case=case, device=device, sync=None)
    finally:
        torch.set_num_threads(expected)
    assert set(seen) == {expected}
    assert timing.cache is CacheMode.HOT and timing.clock is PeerClock.HOST_BLOCK_MEAN and timing.samples_ms
    assert TorchTimerPeer().num_threads is None and worker_thread_count() == torch.get_num_threads()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--peers", "torch,timeit"], "unknown peer 'timeit'"),
        (["--rounds", "0"], "--rounds 0"),
        (["--device", "cuda:7"], "unknown device"),
        (["-f", "op=nosuchop"], "unknown op"),
        (["-f", "op=add", "-f", "n=3"], "matches the filters"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(tmp_path: Path, argv: list[str], message: str) -> None:
    db = tmp_path / "x.db"
    result = runner.invoke(app, ["crosscheck", "quick", "--db", f"sqlite:///{db}", *argv])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not db.exists()


def test_json_and_out_file_hold_the_same_report(tmp_path: Path) -> None:
    out = tmp_path / "cc.json"
    result = runner.invoke(app, ["crosscheck", "quick", "--device", "cpu", "--peers", "all", "--rounds", "1",
                                 "-f", "op=launch", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--json", "--out",
                                 str(out)])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown == json.loads(out.read_text())
    (check,) = [c for c in shown["checks"] if c["peer"] == "torch"]
    assert (len(shown["checks"]) == 4 and check["case_key"].startswith("launch.") and check["status"] == "ok"
            and check["ratio"] > 0)
    assert shown["peers"]["do_bench"]["available"] is False




def test_a_peer_that_times_once_per_process_gets_a_process_per_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvbench's cuda.bench refuses a second run in one process; a peer like it (OwnProcessPeer)
    must be handed each case whole, in a fresh process that prepares the case itself."""
    import os

    from tests.runners.once_per_process_peer import OncePerProcessPeer

    monkeypatch.setenv("ROOFLAB_PLUGINS", "tests.runners.crosscheck_ops")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    peer = OncePerProcessPeer()
    report = run_crosscheck(_spec(tmp_path, ONCE_SPEC, "once"), db_url=f"sqlite:///{tmp_path / 'x.db'}",
                            device="cpu", rounds=2, command_line="test", peer_objects=[peer])
    assert [c.status for c in report.checks] == ["ok", "ok"], [c.error for c in report.checks]
    assert len(set(peer.pids)) == 2 and os.getpid() not in peer.pids
    sleepy = next(c for c in report.checks if "planted_sometimes_slow" in c.case_key)
    assert len(sleepy.peer_rounds_ms) == 2
    assert all(r >= 3.0 for r in sleepy.peer_rounds_ms)  # every call sleeps 3 ms: a sleep never ends early
    # both time the same 3 ms spin: a peer handed another case (add, a thousandth of it) is far outside;
    # the bounds leave room for a spin preempted by the other test worker on a 2-core machine
    assert sleepy.ratio is not None and 1 / 3 < sleepy.ratio < 3
