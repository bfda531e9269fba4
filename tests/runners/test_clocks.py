"""Throttle classification and the clock monitor, driven by a fake NVML-like source."""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from rooflab.runners.machine.clocks import (
    NO_REPORT,
    REASON_BITS,
    ClockMonitor,
    ClockReading,
    classify,
    reason_names,
)
from rooflab.suite.device import DeviceInfo

GPU = DeviceInfo(kind="cuda", name="fake", torch_device="cuda:0", memory_bytes=1 << 36, l2_bytes=50 << 20,
                 compute_capability=(9, 0))
CPU = DeviceInfo(kind="cpu", name="cpu", torch_device="cpu", memory_bytes=1 << 34, l2_bytes=32 << 20)
IDLE, APP, POWER, HW_SLOW, SW_THERMAL, HW_THERMAL, BRAKE = 0x1, 0x2, 0x4, 0x8, 0x20, 0x40, 0x80


class FakeSource:
    """Returns scripted (clock, reasons) readings; repeats the last one when the script runs out."""

    def __init__(self, script: Sequence[tuple[float, int]], max_mhz: float = 1980.0) -> None:
        self.script = list(script)
        self.max_mhz = max_mhz
        self.calls = 0
        self._current = script[0]
        self.lock = threading.Lock()

    def sm_clock_mhz(self) -> float:
        with self.lock:
            self.calls += 1
            if self.script:
                self._current = self.script.pop(0)
            return self._current[0]

    def sm_clock_max_mhz(self) -> float:
        return self.max_mhz

    def event_reasons(self) -> int:
        return self._current[1]


def readings(*pairs: tuple[float, int]) -> list[ClockReading]:
    return [ClockReading(c, r) for c, r in pairs]


def test_steady_boost_clock_is_not_throttled() -> None:
    rep = classify(readings((1980, 0), (1965, 0), (1980, 0)), 1980.0)
    assert not rep.throttled and rep.throttle_reasons == ()
    assert (rep.sm_clock_start_mhz, rep.sm_clock_end_mhz, rep.sm_clock_max_mhz) == (1980, 1980, 1980.0)
    assert rep.sm_clock_min_busy_mhz == 1965 and rep.readings == 3


def test_clock_below_75_percent_while_busy_is_throttled() -> None:
    rep = classify(readings((1980, 0), (1400, 0), (1980, 0)), 1980.0)  # 1400 < 0.75 * 1980 = 1485
    assert rep.throttled and rep.throttle_reasons == ()
    assert not classify(readings((1980, 0), (1490, 0)), 1980.0).throttled


def test_low_clock_while_idle_does_not_count() -> None:
    rep = classify(readings((345, IDLE), (1980, 0), (345, IDLE)), 1980.0)
    assert not rep.throttled
    assert rep.sm_clock_start_mhz == 345 and rep.sm_clock_min_busy_mhz == 1980
    assert rep.throttle_reasons == ()  # gpu_idle is not reported as a reason


@pytest.mark.parametrize("bit, name",
                         [(HW_SLOW, "hw_slowdown"), (SW_THERMAL, "sw_thermal_slowdown"),
                          (HW_THERMAL, "hw_thermal_slowdown"), (BRAKE, "hw_power_brake_slowdown")])
def test_thermal_and_hardware_slowdown_flag_a_case_even_at_full_clock(bit: int, name: str) -> None:
    rep = classify(readings((1980, 0), (1980, bit), (1980, 0)), 1980.0)
    assert rep.throttled and rep.throttle_reasons == (name,)
    assert not rep.at_power_cap


def test_large_gemm_at_power_cap_with_clock_near_max_is_not_throttled() -> None:
    # an H100 bf16 GEMM: the board sits at its power limit the whole case, the SM clock stays
    # within a few % of the maximum; the work ran at the clock it is labelled with
    gemm = readings((1980, 0), (1935, POWER), (1905, POWER), (1920, POWER), (1980, POWER))
    rep = classify(gemm, 1980.0)
    assert not rep.throttled
    assert rep.at_power_cap and rep.throttle_reasons == ("sw_power_cap",)  # kept as information
    assert rep.sm_clock_min_busy_mhz == 1905


def test_clock_at_60_percent_is_throttled_whatever_the_reason() -> None:
    at_cap = classify(readings((1980, 0), (0.6 * 1980, POWER), (1980, 0)), 1980.0)
    assert at_cap.throttled and at_cap.at_power_cap  # the power cap pulled the clock down
    no_reason = classify(readings((1980, 0), (0.6 * 1980, 0)), 1980.0)
    assert no_reason.throttled and not no_reason.at_power_cap


def _counter_readings(watts: float, period_s: float, phase_s: float, polls_s: list[float]) -> list:
    """Readings of an energy counter that rises only every `period_s` (at phase_s + k * period_s),
    taken at the times `polls_s`: what NVML hands back."""
    import math

    from rooflab.runners.machine.clocks import EnergyReading

    def value_mj(t: float) -> float:
        last_update = phase_s + math.floor((t - phase_s) / period_s) * period_s
        return 5e6 + watts * last_update * 1e3

    return [EnergyReading(value_mj(t), t) for t in polls_s]


def test_power_is_timed_between_counter_updates_not_between_the_cases_ends() -> None:
    import random

    from rooflab.runners.machine.clocks import power_from_counter

    rng = random.Random()
    watts, period = rng.uniform(300, 700), 0.1
    worst_old = 0.0
    for _ in range(200):
        phase = rng.uniform(0, period)
        duration = rng.uniform(0.6, 1.5)
        polls = [0.0]
        while polls[-1] < duration:
            polls.append(polls[-1] + rng.uniform(0.008, 0.012))
        readings = _counter_readings(watts, period, phase, polls)
        old = (readings[-1].energy_mj - readings[0].energy_mj) / 1e3 / (polls[-1] - polls[0])
        worst_old = max(worst_old, abs(old / watts - 1))
        new = power_from_counter(readings)
        assert new is not None and new == pytest.approx(watts, rel=0.03), (phase, duration)
    assert worst_old > 0.05  # the first and last reading alone were off by up to a period in a second


def test_power_is_unknown_when_two_updates_cannot_be_timed_well() -> None:
    from rooflab.runners.machine.clocks import EnergyReading, energy_per_call_j, power_from_counter

    # a 0.25 s case polled every 50 ms against a counter that updates every 100 ms: two updates,
    # each known to 25 ms, 100 ms apart: 25 % uncertainty
    readings = _counter_readings(700.0, 0.1, 0.03, [0.0, 0.05, 0.10, 0.15, 0.20, 0.25])
    assert power_from_counter(readings) is None
    assert power_from_counter([EnergyReading(5.0, 1.0), EnergyReading(5.0, 1.2)]) is None  # no update
    assert power_from_counter([EnergyReading(9.0, 1.0), EnergyReading(5.0, 1.2)]) is None  # went backwards
    assert power_from_counter([]) is None
    # two updates, each seen within 2 ms, 0.5 s apart: 349.3 J over 0.5 s
    power = power_from_counter([EnergyReading(1_000_000.0, 10.0), EnergyReading(1_000_700.0, 10.002),
                                EnergyReading(1_000_700.0, 10.500), EnergyReading(1_350_000.0, 10.502)])
    assert power == pytest.approx((1_350_000.0 - 1_000_700.0) / 1e3 / 0.5, rel=1e-9)
    assert energy_per_call_j(700.0, 2.0) == pytest.approx(1.4)
    assert energy_per_call_j(None, 2.0) is None and energy_per_call_j(700.0, None) is None


class EnergyFakeSource(FakeSource):
    """A board drawing `watts`: the energy counter advances with perf_counter."""

    def __init__(self, script: Sequence[tuple[float, int]], watts: float) -> None:
        super().__init__(script)
        self.watts = watts
        self.t0 = time.perf_counter()

    def total_energy_mj(self) -> float:
        return 5e6 + (time.perf_counter() - self.t0) * self.watts * 1e3


def test_monitor_reports_average_power_and_power_cap() -> None:
    from rooflab.runners.machine.clocks import MAX_POWER_TIME_UNCERTAINTY

    src = EnergyFakeSource([(1980, POWER)] * 3 + [(1950, POWER)], watts=690.0)
    mon = ClockMonitor(GPU, source=src, poll_interval_s=0.002).start()
    time.sleep(0.05)
    rep = mon.stop()
    # a counter that rises at every read: each update's instant is known to half a poll interval
    assert rep.power_w == pytest.approx(690.0, rel=MAX_POWER_TIME_UNCERTAINTY)
    assert rep.at_power_cap and not rep.throttled


def test_monitor_without_an_energy_counter_reports_no_power() -> None:
    rep = ClockMonitor(GPU, source=FakeSource([(1980, 0)]), poll_interval_s=0.002).start().stop()
    assert rep.power_w is None and rep.readings >= 2


def test_informational_reasons_are_reported_but_do_not_flag() -> None:
    rep = classify(readings((1755, APP), (1755, APP | 0x10)), 1980.0)
    assert not rep.throttled
    assert rep.throttle_reasons == ("applications_clocks_setting", "sync_boost")


def test_reason_bits_match_pynvml() -> None:
    pynvml = pytest.importorskip("pynvml")
    prefix = "nvmlClocksEventReason" if hasattr(pynvml, "nvmlClocksEventReasonGpuIdle") else "nvmlClocksThrottleReason"
    names = {"GpuIdle": 0x1, "ApplicationsClocksSetting": 0x2, "SwPowerCap": 0x4, "HwSlowdown": 0x8, "SyncBoost": 0x10,
             "SwThermalSlowdown": 0x20, "HwThermalSlowdown": 0x40, "HwPowerBrakeSlowdown": 0x80,
             "DisplayClockSetting": 0x100}
    for suffix, bit in names.items():
        assert getattr(pynvml, prefix + suffix) == bit
        assert bit in REASON_BITS
    assert reason_names(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")


def test_monitor_sees_a_dip_in_the_middle_of_a_case() -> None:
    script = [(1980, 0)] + [(1980, 0)] * 2 + [(1200, 0)] + [(1980, 0)] * 1000
    src = FakeSource(script)
    mon = ClockMonitor(GPU, source=src, poll_interval_s=0.002).start()
    time.sleep(0.1)
    rep = mon.stop()
    assert rep.readings >= 5
    assert rep.sm_clock_start_mhz == 1980 and rep.sm_clock_end_mhz == 1980
    assert rep.sm_clock_min_busy_mhz == 1200 and rep.throttled


def test_monitor_stops_polling_after_stop() -> None:
    src = FakeSource([(1980, 0)])
    mon = ClockMonitor(GPU, source=src, poll_interval_s=0.001).start()
    time.sleep(0.02)
    mon.stop()
    calls = src.calls
    time.sleep(0.02)
    assert src.calls == calls


def test_cpu_or_missing_nvml_gives_an_empty_report() -> None:
    rep = ClockMonitor(CPU).start().stop()
    assert rep == NO_REPORT and rep.sm_clock_start_mhz is None and not rep.throttled


class BrokenSource(FakeSource):
    def event_reasons(self) -> int:
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")


def test_nvml_errors_do_not_break_the_case() -> None:
    rep = ClockMonitor(GPU, source=BrokenSource([(1980, 0)]), poll_interval_s=0.001).start().stop()
    assert rep == NO_REPORT


class OldNvml:
    """An NVML binding that has only the older ClocksThrottleReasons name."""

    NVML_CLOCK_SM = 1

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        assert (handle, clock) == ("h0", 1)
        return 1410

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int:
        assert (handle, clock) == ("h0", 1)
        return 1980

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        return SW_THERMAL

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        assert handle == "h0"
        return 123_456_789  # mJ


class NewNvml(OldNvml):
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return APP


@pytest.mark.parametrize("lib, reasons, throttled",
                         [(OldNvml(), ("sw_thermal_slowdown",), True),
                          (NewNvml(), ("applications_clocks_setting",), True)])
def test_nvml_source_uses_whichever_reasons_api_exists(monkeypatch: pytest.MonkeyPatch, lib, reasons,
                                                       throttled) -> None:
    from rooflab.runners.machine import nvml
    from rooflab.runners.machine.clocks import NvmlClockSource

    monkeypatch.setattr(nvml, "nvml", lambda: lib)
    src = NvmlClockSource("h0")
    assert (src.sm_clock_mhz(), src.sm_clock_max_mhz()) == (1410.0, 1980.0)
    assert src.total_energy_mj() == 123_456_789.0
    rep = ClockMonitor(GPU, source=src, poll_interval_s=0.001).start().stop()
    assert rep.throttle_reasons == reasons
    assert rep.throttled is throttled  # 1410 < 0.75 * 1980 = 1485 flags both
