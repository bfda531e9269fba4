"""Contention: load average, CPU steal and other GPU processes, read from fakes; the quality rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from rooflab.runners.machine.contention import (
    ContentionMonitor,
    ContentionReport,
    other_processes,
    read_cpu_times,
    read_loadavg_1min,
)
from rooflab.suite.quality import NOISY_REL_CI, judge, noise_reasons
from rooflab.vocab import Quality

STAT = "cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n"


def write_stat(path: Path, *, user: int, system: int, idle: int, steal: int) -> None:
    path.write_text(STAT.format(user=user, system=system, idle=idle, steal=steal))


class FakeGpu:
    def __init__(self, *pid_sets: set[int]) -> None:
        self.sets = list(pid_sets)

    def compute_pids(self) -> set[int]:
        return self.sets.pop(0) if len(self.sets) > 1 else self.sets[0]


def monitor(tmp_path: Path, load: str, gpu: FakeGpu | None = None, cpus: int = 4) -> ContentionMonitor:
    (tmp_path / "loadavg").write_text(load)
    return ContentionMonitor(loadavg_path=tmp_path / "loadavg", stat_path=tmp_path / "stat", gpu_source=gpu,
                             logical_cpus=cpus, own_pid=1000, poll_interval_s=60.0)


def test_readers_parse_the_proc_formats(tmp_path: Path) -> None:
    (tmp_path / "loadavg").write_text("3.25 1.10 0.50 4/321 9876\n")
    write_stat(tmp_path / "stat", user=100, system=50, idle=800, steal=25)
    assert read_loadavg_1min(tmp_path / "loadavg") == 3.25
    times = read_cpu_times(tmp_path / "stat")
    assert times is not None and times.total == 975 and times.steal == 25
    assert read_loadavg_1min(tmp_path / "missing") is None and read_cpu_times(tmp_path / "missing") is None


def test_a_quiet_machine_is_not_contended(tmp_path: Path) -> None:
    write_stat(tmp_path / "stat", user=100, system=50, idle=800, steal=0)
    m = monitor(tmp_path, "0.40 0.30 0.20 1/200 1\n", FakeGpu({1000})).start()
    write_stat(tmp_path / "stat", user=200, system=60, idle=1700, steal=1)
    report = m.stop()
    assert report.reasons == ()
    assert report.load_1min_max == 0.40 and report.other_gpu_processes == 0
    assert report.steal_fraction == pytest.approx(1 / 1011)


def test_load_above_the_cpus_is_contended(tmp_path: Path) -> None:
    write_stat(tmp_path / "stat", user=1, system=1, idle=1, steal=0)
    m = monitor(tmp_path, "5.50 2.00 1.00 6/300 1\n", cpus=4).start()
    report = m.stop()
    assert len(report.reasons) == 1 and "load average 5.50 above 4 logical CPUs" in report.reasons[0]


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
    assert ContentionReport(2, None, None, 0, 1).reasons == ()
