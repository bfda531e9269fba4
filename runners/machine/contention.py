"""What else competed for the machine while a case ran: load, CPU steal, other GPU processes.

`ContentionMonitor(...).start()` takes a first reading, a background thread reads again every
`poll_interval_s`, and `.stop()` reads a last time and returns a `ContentionReport`. Three signals:

- machine load: the 1-minute load average (/proc/loadavg). Runnable threads beyond the logical
  CPUs means some thread waits for a CPU: the case is contended when the highest reading exceeds
  LOAD_PER_CPU x the logical CPUs. The load average is a one-minute moving average: it lags a burst
  by seconds and remembers it for about a minute, so it catches sustained load, not a blip;
- CPU steal: the hypervisor ran someone else on our virtual CPUs. From the `cpu` line of
  /proc/stat, steal jiffies / all jiffies between the first and last reading; contended above
  STEAL_FRACTION (unknown when no jiffy passed, as in a case shorter than a tick);
- other GPU processes: NVML's running compute processes on the case's GPU. This process is one of
  them; in a container NVML may list host PIDs that do not match ours, so when our PID is absent
  one listed process is taken to be us. Any other process seen at any reading makes it contended.

Every reader takes its source as a parameter (paths, a process source) so that tests can fake
them; a missing file or NVML means that signal is unknown, never contended.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rooflab.suite.device import DeviceInfo

LOAD_PER_CPU = 1.0  # 1-min load average above this many runnable threads per logical CPU: contended
STEAL_FRACTION = 0.02  # CPU steal above 2 % of the CPU time while the case ran: contended
DEFAULT_POLL_INTERVAL_S = 0.25
LOADAVG = "/proc/loadavg"
PROC_STAT = "/proc/stat"


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies of the aggregate `cpu` line of /proc/stat."""

    total: int
    steal: int


def read_loadavg_1min(path: str | Path = LOADAVG) -> float | None:
    try:
        return float(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_cpu_times(path: str | Path = PROC_STAT) -> CpuTimes | None:
    """user nice system idle iowait irq softirq steal [guest guest_nice]; guest time is already
    counted in user and nice, so it is left out of the total."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("cpu "):
                    values = [int(v) for v in line.split()[1:]]
                    return CpuTimes(total=sum(values[:8]), steal=values[7] if len(values) > 7 else 0)
    except (OSError, ValueError):
        return None
    return None


class GpuProcessSource(Protocol):
    def compute_pids(self) -> set[int]: ...


class NvmlProcessSource:
    """PIDs of the compute processes NVML sees on one GPU."""

    def __init__(self, handle: object) -> None:
        from rooflab.runners.machine import nvml

        lib = nvml.nvml()
        if lib is None:  # a handle comes from NVML, so this means NVML went away in between
            raise RuntimeError("NVML is not available")
        self._fn = (getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3", None)
                    or lib.nvmlDeviceGetComputeRunningProcesses)
        self._handle = handle

    @classmethod
    def for_device(cls, device: DeviceInfo) -> NvmlProcessSource | None:
        if not device.is_cuda:
            return None
        from rooflab.runners.machine import nvml

        if nvml.nvml() is None:
            return None
        handle = nvml.handle_for(device.torch_device)
        return cls(handle) if handle is not None else None

    def compute_pids(self) -> set[int]:
        return {int(p.pid) for p in self._fn(self._handle)}


def other_processes(pids: set[int], own_pid: int) -> int:
    """Processes in `pids` that are not this one (one is taken to be us when our PID is absent)."""
    if not pids:
        return 0
    return len(pids - {own_pid}) if own_pid in pids else len(pids) - 1


@dataclass(frozen=True)
class ContentionReport:
    logical_cpus: int
    load_1min_max: float | None  # highest 1-minute load average read
    steal_fraction: float | None  # steal / all CPU time between the first and last reading
    other_gpu_processes: int  # most other compute processes seen on the GPU at one reading
    readings: int

    @property
    def reasons(self) -> tuple[str, ...]:
        """What made the case contended (empty when nothing was seen)."""
        out = []
        if self.load_1min_max is not None and self.load_1min_max > LOAD_PER_CPU * self.logical_cpus:
            out.append(f"load average {self.load_1min_max:.2f} above {self.logical_cpus} logical CPUs")
        if self.steal_fraction is not None and self.steal_fraction > STEAL_FRACTION:
            out.append(f"CPU steal {100 * self.steal_fraction:.1f} % (bound {100 * STEAL_FRACTION:g} %)")
        if self.other_gpu_processes:
            out.append(f"{self.other_gpu_processes} other process(es) computing on the GPU")
        return tuple(out)


class ContentionMonitor:
    """Samples load, steal and GPU processes between `.start()` and `.stop()`."""

    def __init__(
        self,
        *,
        loadavg_path: str | Path = LOADAVG,
        stat_path: str | Path = PROC_STAT,
        gpu_source: GpuProcessSource | None = None,
        logical_cpus: int | None = None,
        own_pid: int | None = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    ) -> None:
        self._loadavg_path = loadavg_path
        self._stat_path = stat_path
        self._gpu = gpu_source
        self._cpus = logical_cpus or os.cpu_count() or 1
        self._pid = os.getpid() if own_pid is None else own_pid
        self._interval = poll_interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loads: list[float] = []
        self._others: list[int] = []
        self._first: CpuTimes | None = None
        self._readings = 0

    @classmethod
    def for_device(cls, device: DeviceInfo) -> ContentionMonitor:
        try:
            source = NvmlProcessSource.for_device(device)
        except Exception:  # noqa: BLE001 - no NVML process query: that signal is unknown
            source = None
        return cls(loadavg_path=LOADAVG, stat_path=PROC_STAT, gpu_source=source)  # read now: tests point them at fakes

    def start(self) -> ContentionMonitor:
        self._loads, self._others, self._readings = [], [], 0
        self._first = read_cpu_times(self._stat_path)
        self._read()
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="rooflab-contention-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ContentionReport:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._read()
        last = read_cpu_times(self._stat_path)
        steal = None
        if self._first is not None and last is not None and last.total > self._first.total:
            steal = (last.steal - self._first.steal) / (last.total - self._first.total)
        with self._lock:
            loads, others, n = list(self._loads), list(self._others), self._readings
        return ContentionReport(
            logical_cpus=self._cpus,
            load_1min_max=max(loads) if loads else None,
            steal_fraction=steal,
            other_gpu_processes=max(others) if others else 0,
            readings=n,
        )

    def _read(self) -> None:
        load = read_loadavg_1min(self._loadavg_path)
        others = None
        if self._gpu is not None:
            try:
                others = other_processes(self._gpu.compute_pids(), self._pid)
            except Exception:  # noqa: BLE001 - NVML not supported here: unknown, not contended
                others = None
        with self._lock:
            self._readings += 1
            if load is not None:
                self._loads.append(load)
            if others is not None:
                self._others.append(others)

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            self._read()
