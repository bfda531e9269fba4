"""SM clock, clock-event reasons and board energy around a case, from NVML.

`ClockMonitor(device).start()` reads the SM clock, the clock-event (throttle) reasons and the
board's total-energy counter, then a background thread reads clock and reasons again every
`poll_interval_s` until `.stop()`, which reads everything a last time and returns a `ClockReport`.

A case is `throttled` when its work ran slower than the clock it is labelled with: a reading taken
while the GPU was busy showed an SM clock below 75 % of the maximum SM clock (the rule nvbench
applies to its samples), or a thermal or hardware slowdown was reported (`SLOWDOWN_MASK`). The
software power cap (`sw_power_cap`) is not throttling by itself: large GEMMs and attention run at
the power limit routinely with clocks near the maximum, and flagging them would drop the very
results the matrix ceiling comes from. It is kept as a reason and as `at_power_cap`; when the
power cap does pull the clock down, the clock floor flags the case. Readings flagged `gpu_idle`
do not count toward the lowest clock (an idle GPU lowers its clock between cases).

`power_w` is the rise of the energy counter (NVML reports total energy in mJ since the driver
loaded) between the first and the last of its updates seen while the case ran, read at every poll
(`power_from_counter`); None when the counter is unavailable, or the case was too short to time
two updates to within 10 %.

On a CPU, or without NVML, the report has None clocks and power, no reasons and `throttled` False.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rooflab.runners.machine import nvml
from rooflab.suite.device import DeviceInfo

CLOCK_FLOOR_FRACTION = 0.75
DEFAULT_POLL_INTERVAL_S = 0.05

# nvmlClocksEventReason* bits (nvml.h; the same values as the older nvmlClocksThrottleReason*)
REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
# reasons that mean the work ran slower than the clock it asked for: hardware slowdown, software
# and hardware thermal slowdown, power brake. sw_power_cap is information only (module doc).
SLOWDOWN_MASK = 0x8 | 0x20 | 0x40 | 0x80


class ClockSource(Protocol):
    def sm_clock_mhz(self) -> float: ...

    def sm_clock_max_mhz(self) -> float: ...

    def event_reasons(self) -> int: ...


class EnergySource(Protocol):
    def total_energy_mj(self) -> float: ...


@dataclass(frozen=True)
class ClockReading:
    sm_clock_mhz: float
    reasons: int  # bit mask of REASON_BITS


@dataclass(frozen=True)
class ClockReport:
    sm_clock_start_mhz: float | None
    sm_clock_end_mhz: float | None
    sm_clock_max_mhz: float | None
    sm_clock_min_busy_mhz: float | None  # lowest clock read while the GPU was not idle
    throttle_reasons: tuple[str, ...]  # every reason seen except gpu_idle, in bit order
    throttled: bool  # clock below the floor while busy, or a slowdown reason (SLOWDOWN_MASK)
    readings: int
    at_power_cap: bool = False  # sw_power_cap was reported at some reading
    power_w: float | None = None  # average board power over the monitored time


NO_REPORT = ClockReport(None, None, None, None, (), False, 0)


@dataclass(frozen=True)
class EnergyReading:
    energy_mj: float  # NVML total energy since driver load
    at_s: float  # time.perf_counter() of the reading


MAX_POWER_TIME_UNCERTAINTY = 0.10  # power only when the span's timing is known to 10 %


def power_from_counter(readings: Sequence[EnergyReading]) -> float | None:
    """Mean board power between the first and the last update of the energy counter seen in
    `readings` (in time order); None when fewer than two updates were seen, or when their instants
    are too uncertain against the span between them.

    NVML's energy counter advances on its own period (tens of ms or more), not at every read, so the
    difference between a case's first and last reading over its duration can be off by a whole
    period: 895-1,120 W were stored on 700 W boards that way. An update seen at a reading happened
    after the reading before it: its instant is taken as the middle of those two readings, known to
    within half their gap. The power is the counter's rise between the first and the last update
    seen over the time between them, and is given only when the two half-gaps together are at most
    MAX_POWER_TIME_UNCERTAINTY of that time."""
    updates = [(a.at_s, b.at_s, b.energy_mj) for a, b in zip(readings, readings[1:], strict=False)
               if b.energy_mj > a.energy_mj]
    if len(updates) < 2:
        return None
    (a1, b1, e1), (a2, b2, e2) = updates[0], updates[-1]
    span_s = (a2 + b2) / 2 - (a1 + b1) / 2
    uncertainty_s = ((b1 - a1) + (b2 - a2)) / 2
    if span_s <= 0 or uncertainty_s > MAX_POWER_TIME_UNCERTAINTY * span_s:
        return None
    return (e2 - e1) / 1e3 / span_s


def energy_per_call_j(power_w: float | None, median_ms: float | None) -> float | None:
    """Energy of one call: the average board power while the case ran times the median call time."""
    if power_w is None or median_ms is None or not median_ms > 0:
        return None
    return power_w * median_ms / 1e3


def reason_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in REASON_BITS.items() if mask & bit)


def classify(readings: list[ClockReading], max_mhz: float | None, power_w: float | None = None) -> ClockReport:
    """The report for `readings` (first = start, last = end) against the maximum SM clock."""
    if not readings:
        return NO_REPORT
    seen = 0
    for r in readings:
        seen |= r.reasons
    busy = [r.sm_clock_mhz for r in readings if not r.reasons & GPU_IDLE]
    min_busy = min(busy) if busy else None
    slow = max_mhz is not None and min_busy is not None and min_busy < CLOCK_FLOOR_FRACTION * max_mhz
    return ClockReport(
        sm_clock_start_mhz=readings[0].sm_clock_mhz,
        sm_clock_end_mhz=readings[-1].sm_clock_mhz,
        sm_clock_max_mhz=max_mhz,
        sm_clock_min_busy_mhz=min_busy,
        throttle_reasons=reason_names(seen & ~GPU_IDLE),
        throttled=bool(slow or seen & SLOWDOWN_MASK),
        readings=len(readings),
        at_power_cap=bool(seen & SW_POWER_CAP),
        power_w=power_w,
    )


class NvmlClockSource:
    """Clock and reasons of one GPU through pynvml."""

    def __init__(self, handle: object) -> None:
        lib = nvml.nvml()
        if lib is None:  # a handle comes from NVML, so this means NVML went away in between
            raise RuntimeError("NVML is not available")
        self._lib = lib
        self._handle = handle
        # the newer name first; older NVML libraries have only the older one
        self._reasons_fn = (getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
                            or lib.nvmlDeviceGetCurrentClocksThrottleReasons)

    @classmethod
    def for_device(cls, device: DeviceInfo) -> NvmlClockSource | None:
        if not device.is_cuda:
            return None

        handle = nvml.handle_for(device.torch_device)
        return cls(handle) if handle is not None else None

    def sm_clock_mhz(self) -> float:
        return float(self._lib.nvmlDeviceGetClockInfo(self._handle, self._lib.NVML_CLOCK_SM))

    def sm_clock_max_mhz(self) -> float:
        return float(self._lib.nvmlDeviceGetMaxClockInfo(self._handle, self._lib.NVML_CLOCK_SM))

    def event_reasons(self) -> int:
        return int(self._reasons_fn(self._handle))

    def total_energy_mj(self) -> float:
        """nvmlDeviceGetTotalEnergyConsumption: mJ since the driver loaded (Volta and newer)."""
        return float(self._lib.nvmlDeviceGetTotalEnergyConsumption(self._handle))


class ClockMonitor:
    """Watches the SM clock of `device` between `.start()` and `.stop()`."""

    def __init__(
        self,
        device: DeviceInfo,
        *,
        source: ClockSource | None = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    ) -> None:
        self._source = source if source is not None else _default_source(device)
        self._interval = poll_interval_s
        self._readings: list[ClockReading] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._max_mhz: float | None = None
        self._energy: list[EnergyReading] = []

    def start(self) -> ClockMonitor:
        if self._source is None:
            return self
        self._readings = []
        self._stop.clear()
        try:
            self._max_mhz = self._source.sm_clock_max_mhz()
        except Exception:
            self._max_mhz = None
        self._energy = []
        self._read()
        self._thread = threading.Thread(target=self._poll, name="rooflab-clock-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ClockReport:
        if self._source is None or self._thread is None:
            return NO_REPORT
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._read()
        with self._lock:
            readings = list(self._readings)
            energy = list(self._energy)
        return classify(readings, self._max_mhz, power_from_counter(energy))

    def _read_energy(self) -> EnergyReading | None:
        read = getattr(self._source, "total_energy_mj", None)
        if read is None:
            return None
        try:
            return EnergyReading(float(read()), time.perf_counter())
        except Exception:  # NVML_ERROR_NOT_SUPPORTED on boards without the counter
            return None

    def _read(self) -> bool:
        if self._source is None:
            return False
        try:
            reading = ClockReading(self._source.sm_clock_mhz(), self._source.event_reasons())
        except Exception:
            return False
        energy = self._read_energy()
        with self._lock:
            self._readings.append(reading)
            if energy is not None:
                self._energy.append(energy)
        return True

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            if not self._read():
                return


def _default_source(device: DeviceInfo) -> ClockSource | None:
    try:
        return NvmlClockSource.for_device(device)
    except Exception:
        return None
