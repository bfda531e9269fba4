"""Contention: the machine's load and the part of it that is not the case's own, CPU steal and other
GPU processes, read from fakes (and, for the load, from real processes); the quality rule."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from rooflab.runners.machine.contention import (
    OTHERS_MIN_LOAD,
    ContentionMonitor,
    ContentionReport,
    other_processes,
    others_runnable,
    read_cpu_times,
    read_runnable,
    thread_state,
)
from rooflab.suite.quality import NOISY_REL_CI, judge, noise_reasons
from rooflab.vocab import Quality
from tests.runners.fake_proc import fake_proc

STAT = "cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n"


def write_stat(path: Path, *, user: int, system: int, idle: int, steal: int) -> None:
    path.write_text(STAT.format(user=user, system=system, idle=idle, steal=steal))


class FakeGpu:
    def __init__(self, *pid_sets: set[int]) -> None:
        self.sets = list(pid_sets)

    def compute_pids(self) -> set[int]:
        return self.sets.pop(0) if len(self.sets) > 1 else self.sets[0]


def monitor(tmp_path: Path, load: str, gpu: FakeGpu | None = None, cpus: int = 4,
            own: Mapping[int, Sequence[str]] | None = None,
            others: Mapping[int, Sequence[str]] | None = None) -> ContentionMonitor:
    """A monitor of the case whose processes (`own`, default pid 1000 with one running thread) sit
    in a fake /proc beside `others` (default none), with the machine's runnable threads read from a
    fake /proc/loadavg."""
    (tmp_path / "loadavg").write_text(load)
    own = own if own is not None else {1000: ["R"]}
    proc = fake_proc(tmp_path / "proc", {**own, **(others or {})})
    return ContentionMonitor(loadavg_path=tmp_path / "loadavg", stat_path=tmp_path / "stat", gpu_source=gpu,
                             logical_cpus=cpus, own_pid=1000, own_pids=tuple(own), proc=proc, poll_interval_s=60.0)


def test_readers_parse_the_proc_formats(tmp_path: Path) -> None:
    (tmp_path / "loadavg").write_text("3.25 1.10 0.50 4/321 9876\n")
    write_stat(tmp_path / "stat", user=100, system=50, idle=800, steal=25)
    assert read_runnable(tmp_path / "loadavg") == 4
    times = read_cpu_times(tmp_path / "stat")
    assert times is not None and times.total == 975 and times.steal == 25
    assert read_runnable(tmp_path / "missing") is None and read_cpu_times(tmp_path / "missing") is None
    assert thread_state("77 (a (b) c) S 1 2 3") == "S" and thread_state("no parenthesis") is None
    proc = fake_proc(tmp_path / "proc", {10: ["R", "S", "R"], 20: ["D", "R"], 30: ["S"]})
    assert others_runnable([30], proc) == 3 and others_runnable([10, 20, 30], proc) == 0
    assert others_runnable([10, 99], proc) == 1  # an own process that is gone changes nothing
    assert others_runnable([], tmp_path / "no-proc") == 0


def test_a_quiet_machine_is_not_contended(tmp_path: Path) -> None:
    write_stat(tmp_path / "stat", user=100, system=50, idle=800, steal=0)
    m = monitor(tmp_path, "0.40 0.30 0.20 1/200 1\n", FakeGpu({1000})).start()
    write_stat(tmp_path / "stat", user=200, system=60, idle=1700, steal=1)
    report = m.stop()
    assert report.reasons == ()
    assert report.load == 1 and report.others_load == 0 and report.other_gpu_processes == 0
    assert report.steal_fraction == pytest.approx(1 / 1011)


def test_load_above_the_cpus_is_contended(tmp_path: Path) -> None:
    write_stat(tmp_path / "stat", user=1, system=1, idle=1, steal=0)
    m = monitor(tmp_path, "5.50 2.00 1.00 6/300 1\n", cpus=4, others={5000: ["R", "R", "S"], 6000: ["R"] * 3}).start()
    report = m.stop()
    assert report.load == 6 and report.others_load == 5
    assert report.reasons == ("load 6.00 above 4 logical CPUs, 5.00 of it not the case's own",)


def test_the_cases_own_ranks_and_their_threads_are_not_contention(tmp_path: Path) -> None:
    """Four ranks of a collective on two CPUs, each with a running gloo thread beside its main one:
    eight runnable threads, all the case's own. Counted as load (the rule before), contended."""
    ranks = {pid: ["R", "R", "S"] for pid in random.sample(range(2000, 9000), 4)}
    m = monitor(tmp_path, "7.90 7.00 3.00 8/300 1\n", cpus=2, own=ranks).start()
    report = m.stop()
    assert report.load == 8 and report.others_load == 0 and report.reasons == ()
    # one more thread that is not theirs: still within the others' allowance; two: contended
    one, two = ContentionReport(2, 9.0, 1.0, None, 0, 2), ContentionReport(2, 9.0, OTHERS_MIN_LOAD - 0.01, None, 0, 2)
    assert one.reasons and not two.reasons


def test_cpu_steal_is_contended(tmp_path: Path) -> None:
    write_stat(tmp_path / "stat", user=100, system=0, idle=100, steal=0)
    m = monitor(tmp_path, "0.1 0.1 0.1 1/1 1\n").start()
    write_stat(tmp_path / "stat", user=150, system=0, idle=130, steal=20)  # 20 of 100 jiffies stolen
    report = m.stop()
    assert report.steal_fraction == pytest.approx(0.2)
    assert any("CPU steal 20.0 %" in r for r in report.reasons)


def test_another_gpu_process_is_contended_and_our_own_is_not(tmp_path: Path) -> None:
    write_stat(tmp_path / "stat", user=1, system=1, idle=1, steal=0)
    m = monitor(tmp_path, "0.1 0.1 0.1 1/1 1\n", FakeGpu({1000}, {1000, 4242}, {1000})).start()
    m._read()  # a poll between start and stop sees the other process
    report = m.stop()
    assert report.other_gpu_processes == 1
    assert report.reasons == ("1 other process(es) computing on the GPU",)


def test_other_processes_when_nvml_lists_host_pids() -> None:
    assert other_processes({1000, 7}, 1000) == 1
    assert other_processes({55}, 1000) == 0  # a container: our PID is not the one NVML shows
    assert other_processes({55, 56}, 1000) == 1
    assert other_processes(set(), 1000) == 0


def test_noise_rule_at_the_bound() -> None:
    assert noise_reasons(0.30, "max_time") and "30.0 %" in noise_reasons(0.30, "max_time")[0]
    assert noise_reasons(NOISY_REL_CI, "max_time") == ()
    assert noise_reasons(None, "max_samples")
    assert noise_reasons(0.30, "converged") == ()


def test_judge_prefers_contended_and_keeps_every_reason() -> None:
    assert judge((), ()) == (Quality.GOOD, ())
    assert judge(("wide",), ()) == (Quality.NOISY, ("wide",))
    q, reasons = judge(("wide",), ("load",))
    assert q == Quality.CONTENDED and reasons == ("load", "wide")


def test_report_with_unknown_signals_is_not_contended() -> None:
    assert ContentionReport(2, None, None, None, 0, 1).reasons == ()


def linked_proc(root: Path, pids: Sequence[int]) -> Path:
    """A /proc that shows only the real processes `pids` (each a link to its /proc/PID): the test's
    own world, so that the other jobs on the test machine do not decide its verdicts."""
    root.mkdir()
    for pid in pids:
        (root / str(pid)).symlink_to(f"/proc/{pid}")
    return root


class WorldRunnable:
    """The machine's runnable threads as those of the processes a `linked_proc` shows."""

    def __init__(self, proc: Path) -> None:
        self.proc = proc

    def runnable(self) -> int:
        return others_runnable((), self.proc)


@pytest.fixture
def busy() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Four real busy processes (a Python loop each), killed at the end."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        time.sleep(0.3)  # in their loops: running, or waiting for a CPU (state R) from here on
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _watched(tmp_path: Path, own: list[int], world: list[int], readings: int = 6) -> ContentionReport:
    """The monitor of a case of `own` processes (and this one, which reads), on a machine of `world`
    and this process."""
    proc = linked_proc(tmp_path / f"proc-{len(world)}", [*world, os.getpid()])
    m = ContentionMonitor(runnable_source=WorldRunnable(proc), stat_path="/nonexistent", logical_cpus=2,
                          own_pids=own, proc=proc, poll_interval_s=60.0).start()
    for _ in range(readings - 2):
        time.sleep(0.02)
        m._read()
    return m.stop()


def test_real_processes_own_ranks_are_not_contended_and_a_competitor_is(
        tmp_path: Path, busy: list[subprocess.Popen[bytes]]) -> None:
    """Three real busy processes as the case's ranks on a machine of two CPUs: three runnable
    threads, none of them another's (not contended; counted as load, as before, contended). A
    fourth busy process that is not the case's: contended."""
    ranks, competitor = [p.pid for p in busy[:3]], busy[3].pid
    alone = _watched(tmp_path, ranks, ranks)
    assert alone.load == pytest.approx(4, abs=0.5) and alone.others_load == 0  # with the reader
    assert alone.reasons == ()
    crowded = _watched(tmp_path, ranks, [*ranks, competitor])
    assert crowded.others_load == pytest.approx(1, abs=0.34)
    assert crowded.reasons and "not the case's own" in crowded.reasons[0]


class TurningLoad:
    """The machine's runnable threads read as `total`, after which the case's ranks turn to the
    state `then` (as ranks that wait on each other do, between a reading of the load and the scan
    of their threads)."""

    def __init__(self, total: int, proc: Path, ranks: Sequence[int], then: str) -> None:
        self.total, self.proc, self.ranks, self.then = total, proc, ranks, then

    def runnable(self) -> int:
        for pid in self.ranks:
            for stat in (self.proc / str(pid) / "task").glob("*/stat"):
                stat.write_text(stat.read_text().replace(") R ", f") {self.then} ").replace(") S ", f") {self.then} "))
        return self.total


@pytest.mark.parametrize(("ranks_then", "others", "total", "others_load"), [
    ("S", {}, 4, 0),  # running at the load, waiting at the scan: 4 - 0 made up 4 others
    ("R", {7000: ["R"]}, 1, 1),  # waiting at the load, running at the scan: 1 - 4 hid the one other
])
def test_ranks_that_turn_between_the_load_and_the_scan_change_no_others(
        tmp_path: Path, ranks_then: str, others: dict[int, list[str]], total: int, others_load: int) -> None:
    """Four ranks on two CPUs. Taking the others as the load less the ranks' threads scanned an
    instant later read the ranks' turns as others (a contended verdict on a quiet machine) or hid a
    real other: counted directly, the others are what runs outside the case."""
    ranks = random.sample(range(2000, 6000), 4)
    first = "R" if ranks_then == "S" else "S"
    proc = fake_proc(tmp_path / "proc", {**{pid: [first] for pid in ranks}, **others})
    m = ContentionMonitor(runnable_source=TurningLoad(total, proc, ranks, ranks_then), stat_path="/nonexistent",
                          logical_cpus=2, own_pid=ranks[0], own_pids=ranks, proc=proc, poll_interval_s=60.0)
    report = m.start().stop()
    assert report.readings == 2 and report.load == total and report.others_load == others_load
    assert report.reasons == ()
