"""Watch the machine while a case is timed, and turn what was seen into the record's observation.

One stage fills `rooflab.record.MachineObservation`, for a run's worker and for `rooflab.measure`
alike: the clocks, throttling and power (NVML, runners.machine.clocks), what else competed for the
machine (runners.machine.contention), and the result's quality judged from both and from its own
samples (suite.quality). A field added to the observation is filled here.
"""
from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rooflab.record import MachineObservation, Statistics
from rooflab.runners.machine.clocks import NO_REPORT, ClockMonitor, ClockReport, energy_per_call_j
from rooflab.runners.machine.contention import ContentionMonitor
from rooflab.suite.device import DeviceInfo
from rooflab.suite.quality import judge, noise_reasons


@dataclass
class Watch:
    """What was seen while the timed block ran (filled when the block ends)."""

    clocks: ClockReport = NO_REPORT
    contention: tuple[str, ...] = field(default_factory=tuple)

    def observation(self, stats: Statistics, stop_reason: str | None,
                    cpu_threads: int | None = None) -> MachineObservation:
        """The record's observation of a timed result with these statistics."""
        quality, reasons = judge(noise_reasons(stats.rel_ci_halfwidth, stop_reason), self.contention)
        clocks = self.clocks
        return MachineObservation(
            sm_clock_start_mhz=clocks.sm_clock_start_mhz,
            sm_clock_end_mhz=clocks.sm_clock_end_mhz,
            sm_clock_max_mhz=clocks.sm_clock_max_mhz,
            throttle_reasons=tuple(clocks.throttle_reasons),
            throttled=bool(clocks.throttled),
            power_w=clocks.power_w,
            energy_j=energy_per_call_j(clocks.power_w, stats.median_ms),
            quality=str(quality),
            quality_reasons=reasons,
            cpu_threads=cpu_threads,
        )


@contextmanager
def watching(device: DeviceInfo, own_pids: Collection[int] = ()) -> Iterator[Watch]:
    """Monitor clocks and contention around the block; the yielded Watch is filled as it ends.
    `own_pids`: the case's processes besides this one (a collective's other ranks on this host),
    whose load is the case's own, not contention."""
    watch = Watch()
    clocks = ClockMonitor(device)
    clocks.start()
    contention = ContentionMonitor.for_device(device, own_pids).start()
    try:
        yield watch
    finally:
        watch.clocks = clocks.stop()
        watch.contention = tuple(contention.stop().reasons)
