"""What else competed for the machine while a case ran: load, CPU steal, other GPU processes.

`ContentionMonitor(...).start()` takes a first reading, a background thread reads again every
`poll_interval_s`, and `.stop()` reads a last time and returns a `ContentionReport`. Three signals:

- machine load, and how much of it is not the case's own: at each reading, the threads runnable
  on the whole machine now (the 4th field of /proc/loadavg, `running/total`) and, counted apart in
  one pass over /proc, the runnable threads (`R` state of /proc/PID/task/*/stat) of every process
  that is not the case's own (`own_pids`: the worker, or every rank of a collective's group on this
  host, with all their threads). Their means over the readings are the case's load and the others'
  load. Runnable threads beyond the logical CPUs means some thread waits for a CPU; the case is
  contended when the load exceeds LOAD_PER_CPU x the logical CPUs and at least OTHERS_MIN_LOAD of
  it is not its own. A group of ranks that outnumbers the CPUs is not contended by itself: that is
  how the case was asked to run (a collective's ranks on a small CPU), not something else competing.
  The others are counted, not taken as the load less the case's own threads: the load and a scan of
  the own threads are two instants, and ranks that flicker between running and waiting in between
  made up others that were not there (or hid some that were). (The one-minute load average, read
  before, counted the case's own ranks and lagged them by a minute: every CPU collective after the
  first minute read contended on a quiet machine.) The scan sees the processes this /proc shows: in
  a container with its own process namespace, another container's threads count in the load but
  not as others;
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
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rooflab.runners.machine import nvml
from rooflab.suite.device import DeviceInfo

LOAD_PER_CPU = 1.0  # runnable threads above this many per logical CPU (on average over the readings) ...
# ... with at least this many of them, on average, not the case's own: contended (a daemon woken
# at one reading of two is half a thread; a competing busy process is one)
OTHERS_MIN_LOAD = 0.5
STEAL_FRACTION = 0.02  # CPU steal above 2 % of the CPU time while the case ran: contended
DEFAULT_POLL_INTERVAL_S = 0.25
LOADAVG = "/proc/loadavg"
PROC_STAT = "/proc/stat"
PROC = "/proc"  # where each own process's threads are read (PROC/PID/task/TID/stat)
RUNNING = "R"  # a thread's state in its stat file when it runs or waits for a CPU


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies of the aggregate `cpu` line of /proc/stat."""

    total: int
    steal: int


def read_runnable(path: str | Path = LOADAVG) -> int | None:
    """Threads runnable on the machine now (running or waiting for a CPU): the `running` of the
    4th field of /proc/loadavg, `running/total`; the reading thread itself is one of them."""
    try:
        return int(Path(path).read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def thread_state(stat_text: str) -> str | None:
    """A thread's state letter from its /proc/PID/task/TID/stat line: the first field after the
    command name, which is in parentheses and may itself hold spaces and parentheses."""
    _, close, rest = stat_text.rpartition(")")
    fields = rest.split()
    return fields[0] if close and fields else None


def others_runnable(own_pids: Collection[int], proc: str | Path = PROC) -> int:
    """How many threads are runnable now (state R) in the processes under `proc` that are not
    `own_pids`, in one pass; a process or thread gone in between counts none."""
    own = {str(pid) for pid in own_pids}
    count = 0
    try:
        entries = [e.name for e in os.scandir(proc) if e.name.isdigit() and e.name not in own]
    except OSError:
        return 0
    for pid in entries:
        try:
            tasks = [t.name for t in os.scandir(os.path.join(proc, pid, "task"))]
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(os.path.join(proc, pid, "task", tid, "stat"), encoding="ascii", errors="replace") as fh:
                    count += thread_state(fh.read()) == RUNNING
            except OSError:
                continue
    return count


class RunnableSource(Protocol):
    """The machine's runnable threads now (None: unknown)."""

    def runnable(self) -> int | None: ...


@dataclass(frozen=True)
class LoadavgRunnable:
    """The machine's runnable threads from /proc/loadavg (`read_runnable`)."""

    path: str | Path = LOADAVG

    def runnable(self) -> int | None:
        return read_runnable(self.path)


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
    load: float | None  # runnable threads on the machine, the mean of the readings (None: unknown)
    others_load: float | None  # of them, the threads not of the case's own processes (mean of the readings)
    steal_fraction: float | None  # steal / all CPU time between the first and last reading
    other_gpu_processes: int  # most other compute processes seen on the GPU at one reading
    readings: int

    @property
    def reasons(self) -> tuple[str, ...]:
        """What made the case contended (empty when nothing was seen)."""
        out = []
        if loaded(self.load, self.others_load, self.logical_cpus):
            out.append(f"load {self.load:.2f} above {self.logical_cpus} logical CPUs, {self.others_load:.2f} of it "
                       "not the case's own")
        if self.steal_fraction is not None and self.steal_fraction > STEAL_FRACTION:
            out.append(f"CPU steal {100 * self.steal_fraction:.1f} % (bound {100 * STEAL_FRACTION:g} %)")
        if self.other_gpu_processes:
            out.append(f"{self.other_gpu_processes} other process(es) computing on the GPU")
        return tuple(out)


def loaded(load: float | None, others_load: float | None, logical_cpus: int) -> bool:
    """The load rule: more threads runnable than LOAD_PER_CPU x the logical CPUs, on average, and at
    least OTHERS_MIN_LOAD of them not the case's own (None: unknown, never contended)."""
    if load is None or others_load is None:
        return False
    return load > LOAD_PER_CPU * logical_cpus and others_load >= OTHERS_MIN_LOAD


class ContentionMonitor:
    """Samples load, steal and GPU processes between `.start()` and `.stop()`. `own_pids` are the
    case's own processes (default: this one), whose threads are not counted as others' load;
    `runnable_source` counts the machine's runnable threads (default: /proc/loadavg at
    `loadavg_path`), `proc` is where every other process's threads are counted."""

    def __init__(
        self,
        *,
        loadavg_path: str | Path = LOADAVG,
        stat_path: str | Path = PROC_STAT,
        gpu_source: GpuProcessSource | None = None,
        logical_cpus: int | None = None,
        own_pid: int | None = None,
        own_pids: Collection[int] = (),
        runnable_source: RunnableSource | None = None,
        proc: str | Path = PROC,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    ) -> None:
        self._runnable = runnable_source or LoadavgRunnable(loadavg_path)
        self._stat_path = stat_path
        self._proc = proc
        self._gpu = gpu_source
        self._cpus = logical_cpus or os.cpu_count() or 1
        self._pid = os.getpid() if own_pid is None else own_pid
        self._own = frozenset(own_pids) | {self._pid}
        self._interval = poll_interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loads: list[tuple[int, int]] = []  # per reading: (runnable on the machine, runnable not our own)
        self._others: list[int] = []
        self._first: CpuTimes | None = None
        self._readings = 0

    @classmethod
    def for_device(cls, device: DeviceInfo, own_pids: Collection[int] = ()) -> ContentionMonitor:
        """The monitor of a case on `device`; `own_pids`: the case's processes besides this one (a
        collective's other ranks on this host)."""
        try:
            source = NvmlProcessSource.for_device(device)
        except Exception:  # noqa: BLE001 - no NVML process query: that signal is unknown
            source = None
        # the paths are read now, not at import: tests point them at fakes
        return cls(loadavg_path=LOADAVG, stat_path=PROC_STAT, gpu_source=source, own_pids=own_pids, proc=PROC)

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
            load=sum(total for total, _ in loads) / len(loads) if loads else None,
            others_load=sum(other for _, other in loads) / len(loads) if loads else None,
            steal_fraction=steal,
            other_gpu_processes=max(others) if others else 0,
            readings=n,
        )

    def _read(self) -> None:
        total = self._runnable.runnable()
        load = None if total is None else (total, others_runnable(self._own, self._proc))
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
