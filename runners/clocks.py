"""SM clock and throttle reasons around a case, from NVML.

`ClockMonitor(device).start()` reads the SM clock and the clock-event (throttle) reasons, then a
background thread reads them again every `poll_interval_s` until `.stop()`, which reads them a last
time and returns a `ClockReport`. A case is `throttled` when a reading taken while the GPU was busy
showed an SM clock below 75 % of the maximum SM clock, or when thermal or power throttling was
reported at any reading. Readings flagged `gpu_idle` do not count toward the lowest clock (an idle
GPU lowers its clock between cases; that is not a slowdown of the work).

On a CPU, or without NVML, the report has None clocks, no reasons and `throttled` False.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from suite.device import DeviceInfo

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
THROTTLING_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # power cap, HW slowdown, thermal, power brake


class ClockSource(Protocol):
    def sm_clock_mhz(self) -> float: ...

    def sm_clock_max_mhz(self) -> float: ...

    def event_reasons(self) -> int: ...


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
    throttled: bool
    readings: int


NO_REPORT = ClockReport(None, None, None, None, (), False, 0)


def reason_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in REASON_BITS.items() if mask & bit)


def classify(readings: list[ClockReading], max_mhz: float | None) -> ClockReport:
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
        throttled=bool(slow or seen & THROTTLING_MASK),
        readings=len(readings),
    )


class NvmlClockSource:
    """Clock and reasons of one GPU through pynvml."""

    def __init__(self, handle: object) -> None:
        from runners import nvml

        self._lib = nvml.nvml()
        self._handle = handle
        lib = self._lib
        self._reasons_fn = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            lib, "nvmlDeviceGetCurrentClocksThrottleReasons"
        )

    @classmethod
    def for_device(cls, device: DeviceInfo) -> "NvmlClockSource | None":
        if not device.is_cuda:
            return None
        from runners import nvml

        handle = nvml.handle_for(device.torch_device)
        return cls(handle) if handle is not None else None

    def sm_clock_mhz(self) -> float:
        return float(self._lib.nvmlDeviceGetClockInfo(self._handle, self._lib.NVML_CLOCK_SM))

    def sm_clock_max_mhz(self) -> float:
        return float(self._lib.nvmlDeviceGetMaxClockInfo(self._handle, self._lib.NVML_CLOCK_SM))

    def event_reasons(self) -> int:
        return int(self._reasons_fn(self._handle))


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

    def start(self) -> "ClockMonitor":
        if self._source is None:
            return self
        self._readings = []
        self._stop.clear()
        try:
            self._max_mhz = self._source.sm_clock_max_mhz()
        except Exception:
            self._max_mhz = None
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
        return classify(readings, self._max_mhz)

    def _read(self) -> bool:
        try:
            reading = ClockReading(self._source.sm_clock_mhz(), self._source.event_reasons())
        except Exception:
            return False
        with self._lock:
            self._readings.append(reading)
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
