"""How often NVML's energy counter advances, and whether rooflab's `power_w` reads it right (a GPU
script; without CUDA or NVML it says so and exits with code 3, which scripts/gpu-validate.sh records
as skipped).

1. Update period. The counter (nvmlDeviceGetTotalEnergyConsumption) is read in a tight loop, first
   with the GPU idle, then busy with bf16 GEMMs back to back. Every change of value is an update;
   the gaps between updates give the counter's period (median, p10, p90) and each update's size.
2. `power_w` against a reference. The reference is the busy GPU's mean power from the same tight
   loop: the counter's rise between its first and last update over the time between them, which the
   tight loop knows to a read's duration. Then rooflab's own ClockMonitor (the one the worker runs
   around every case, polling every 50 ms) watches windows of 0.1 to 2 s of the same load: the
   share of windows that get a power and the error of each against the reference. NVML's power
   reading (nvmlDeviceGetPowerUsage) and the enforced limit are printed beside, for context.

    python scripts/gpu_energy_probe.py --json out/energy-probe.json --markdown out/energy-probe.md
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rooflab.runners.machine import nvml
from rooflab.runners.machine.clocks import ClockMonitor, NvmlClockSource
from rooflab.runners.machine.environment import capture

IDLE_S = 2.0
BUSY_S = 4.0
WINDOWS_S = (0.1, 0.25, 0.5, 1.0, 2.0)
WINDOW_REPEATS = 5
GEMM_SIZE = 8192


@dataclass(frozen=True)
class Period:
    state: str  # idle or busy
    reads: int
    updates: int
    median_ms: float | None  # gap between successive updates
    p10_ms: float | None
    p90_ms: float | None
    increment_median_mj: float | None  # counter rise per update
    read_us: float  # mean duration of one read
    mean_power_w: float | None  # rise between the first and last update over the time between them


@dataclass(frozen=True)
class Window:
    window_s: float
    windows: int
    with_power: int
    power_w: tuple[float, ...]
    worst_error_pct: float | None  # largest |power_w / reference - 1| among the windows with a power


def update_instants(readings: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(instant, counter) of each update seen in `readings` of (time s, counter mJ) in time order:
    an update seen at a reading happened after the reading before it; its instant is the middle of
    the two."""
    return [((t0 + t1) / 2, e1) for (t0, e0), (t1, e1) in zip(readings, readings[1:], strict=False) if e1 > e0]


def period(state: str, readings: Sequence[tuple[float, float]]) -> Period:
    """Update period, update size and mean power of a tight-loop series of (time s, counter mJ)."""
    ups = update_instants(readings)
    gaps_ms = [1e3 * (b[0] - a[0]) for a, b in zip(ups, ups[1:], strict=False)]
    steps_mj = [b[1] - a[1] for a, b in zip(ups, ups[1:], strict=False)]
    read_us = 1e6 * (readings[-1][0] - readings[0][0]) / max(len(readings) - 1, 1) if readings else 0.0
    power = None
    if len(ups) >= 2 and ups[-1][0] > ups[0][0]:
        power = (ups[-1][1] - ups[0][1]) / 1e3 / (ups[-1][0] - ups[0][0])
    p10: float | None
    p90: float | None
    if len(gaps_ms) >= 2:
        deciles = statistics.quantiles(gaps_ms, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = gaps_ms[0] if gaps_ms else None
    return Period(state, len(readings), len(ups), statistics.median(gaps_ms) if gaps_ms else None, p10, p90,
                  statistics.median(steps_mj) if steps_mj else None, read_us, power)


def tight_loop(read_mj: Callable[[], float], seconds: float) -> list[tuple[float, float]]:
    out = []
    end = time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        out.append((now, read_mj()))
    return out


def window_errors(window_s: float, powers: Sequence[float | None], reference_w: float | None) -> Window:
    got = tuple(p for p in powers if p is not None)
    worst = None
    if got and reference_w:
        worst = 100 * max(abs(p / reference_w - 1) for p in got)
    return Window(window_s, len(powers), len(got), got, worst)


class Load:
    """bf16 GEMMs back to back on a thread of their own until stopped."""

    def __init__(self, torch_device: str) -> None:
        import torch

        self._torch = torch
        self._a = torch.randn(GEMM_SIZE, GEMM_SIZE, device=torch_device, dtype=torch.bfloat16)
        self._b = torch.randn(GEMM_SIZE, GEMM_SIZE, device=torch_device, dtype=torch.bfloat16)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(20):  # about 30 ms of work queued at a time
                self._a @ self._b
            self._torch.cuda.synchronize()

    def __enter__(self) -> Load:
        self._thread.start()
        time.sleep(1.0)  # to the steady clock and power of the load
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def markdown(device_name: str, periods: list[Period], windows: list[Window], usage_w: float | None,
             limit_w: float | None) -> str:
    def f(v: float | None, fmt: str = ".1f") -> str:
        return "-" if v is None else format(v, fmt)

    lines = [f"# NVML energy counter on {device_name}", "",
             "| GPU | reads | updates | period median ms | p10 | p90 | mJ per update | read us | mean power W |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {p.state} | {p.reads} | {p.updates} | {f(p.median_ms)} | {f(p.p10_ms)} | {f(p.p90_ms)} | "
              f"{f(p.increment_median_mj, '.0f')} | {f(p.read_us, '.2f')} | {f(p.mean_power_w)} |" for p in periods]
    lines += ["", f"NVML power reading over the busy time: {f(usage_w)} W; enforced limit {f(limit_w)} W.", "",
              "rooflab's ClockMonitor (50 ms poll) over windows of the same load, against the busy reference:", "",
              "| window s | windows | with a power | power W | worst error % |", "|---:|---:|---:|---|---:|"]
    lines += [f"| {w.window_s:g} | {w.windows} | {w.with_power} | {', '.join(f'{p:.0f}' for p in w.power_w) or '-'} | "
              f"{f(w.worst_error_pct)} |" for w in windows]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked (SystemExit with the message on a bad one); nothing is measured."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device: the energy probe reads a GPU's counter")
        return 3

    _, device = capture("cuda:0")
    source, lib = NvmlClockSource.for_device(device), nvml.nvml()
    if source is None or lib is None:
        print("SKIP: NVML is not available: no energy counter to read")
        return 3
    handle = nvml.handle_for(device.torch_device)
    periods = [period("idle", tight_loop(source.total_energy_mj, IDLE_S))]
    usage: list[float] = []
    windows: list[Window] = []
    with Load(device.torch_device):
        busy = tight_loop(source.total_energy_mj, BUSY_S)
        periods.append(period("busy", busy))
        reference = periods[-1].mean_power_w
        for window_s in WINDOWS_S:
            powers = []
            for _ in range(WINDOW_REPEATS):
                monitor = ClockMonitor(device, source=source).start()
                time.sleep(window_s)
                powers.append(monitor.stop().power_w)
                usage.append(lib.nvmlDeviceGetPowerUsage(handle) / 1e3)
            windows.append(window_errors(window_s, powers, reference))
    limit_w = lib.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3
    usage_w = statistics.fmean(usage) if usage else None
    text = markdown(device.name, periods, windows, usage_w, limit_w)
    print(text)
    if args.json:
        payload: dict[str, Any] = {"device": device.name, "periods": [asdict(p) for p in periods],
                                   "windows": [asdict(w) for w in windows], "power_usage_w": usage_w,
                                   "power_limit_w": limit_w}
        args.json.write_text(json.dumps(payload, indent=2))
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
