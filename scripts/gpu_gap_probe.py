"""Why rooflab's cold figures differed from do_bench's and nvbench's: the two method choices issue 20
settled, measured with rooflab's own engine (a GPU script; on a machine without CUDA it says so and
exits with code 3, which scripts/gpu-validate.sh records as skipped; `--device cpu` runs the same
probes at CPU sizes, to try the script where there is no GPU).

1. Flush by writing or by reading. The same copy (float32, 2^26 elements) is timed cold behind the
   write flush (`flush_method: write_sweep`, the default now, as after a kernel that wrote) and
   behind the read flush (`read_sweep`, the old default: clean lines), over the same buffer of
   twice the L2. The dirty-lines explanation predicts the write flush reads slower by about the
   gap the old evidence showed against the peers (about 5 us on an H100, a fixed amount of bytes).
2. Pace. A bf16 8192^3 GEMM is timed cold back to back (`pace: back_to_back`), cold with the device
   left idle after each sample (`pace: idle`, as nvbench's cold loop), and hot back to back (what
   the matrix roof is set from). The duty-cycle explanation predicts the idle-paced samples read
   faster, at a higher SM clock and lower power, than the back-to-back cold ones.
Each figure carries the clocks and power the engine's clock monitor saw while it ran.

    python scripts/gpu_gap_probe.py --json out/gap-probe.json --markdown out/gap-probe.md
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rooflab.runners.engine.stats import summarize
from rooflab.runners.engine.timing import measure
from rooflab.runners.machine.clocks import ClockMonitor
from rooflab.runners.machine.environment import capture
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import DeviceKind, device_kind_of

COPY_ELEMENTS = {"cuda": 1 << 26, "cpu": 1 << 24}
GEMM_SIZE = {"cuda": 8192, "cpu": 1024}
PROBE_TIMING = {"warmup_ms": 25, "warmup_calls": 3, "min_samples": 30, "min_time_ms": 200, "max_time_ms": 3000,
                "target_precision": 0.005}


@dataclass(frozen=True)
class Figure:
    name: str
    median_us: float
    p10_us: float
    p90_us: float
    n: int
    sm_clock_mhz: float | None = None  # the SM clock at the end of the figure's sampling (NVML), where read
    power_w: float | None = None  # the board's average power while it ran, where read
    note: str = ""


def figure(name: str, samples_ms: list[float], clocks_mhz: list[float] | None = None, note: str = "",
           power_w: float | None = None) -> Figure:
    """Median, p10 and p90 of `samples_ms` as rooflab summarises samples (runners.engine.stats.summarize),
    in us; the mean clock of `clocks_mhz`."""
    if not samples_ms:
        raise ValueError(f"{name}: no samples")
    s = summarize(tuple(samples_ms))
    clock = statistics.fmean(clocks_mhz) if clocks_mhz else None
    return Figure(name, 1e3 * s.median_ms, 1e3 * s.p10_ms, 1e3 * s.p90_ms, s.n_samples, clock, power_w, note)


def engine_figure(name: str, fn: Any, device: Any, *, cache: str, **timing: Any) -> Figure:
    """`fn` timed by rooflab's engine with the probe's settings and `timing` overrides, clocks watched."""
    settings = TimingSettings().override(PROBE_TIMING | timing)
    monitor = ClockMonitor(device).start()
    try:
        r = measure(fn, device=device, settings=settings, cache=cache, timing_mode="launch")
    finally:
        clocks = monitor.stop()
    clock = [clocks.sm_clock_end_mhz] if clocks.sm_clock_end_mhz is not None else None
    how = r.method
    return figure(name, list(r.samples_ms), clock, power_w=clocks.power_w,
                  note=f"{how.cache}, flush {how.flush_method}, pace {how.pace}, hold {how.sync_method}, "
                       f"stop {how.stop_reason}")


def flush_probe(device: Any) -> list[Figure]:
    import torch

    n = COPY_ELEMENTS["cuda" if device.is_cuda else "cpu"]
    x = torch.randn(n, device=device.torch_device)
    y = torch.empty_like(x)
    fn = lambda: y.copy_(x)  # noqa: E731 - a named one-line lambda
    label = f"copy f32 {n} elements"
    return [engine_figure(f"{label}, write flush", fn, device, cache="cold", flush_method="write_sweep"),
            engine_figure(f"{label}, read flush", fn, device, cache="cold", flush_method="read_sweep")]


def pace_probe(device: Any) -> list[Figure]:
    import torch

    size = GEMM_SIZE["cuda" if device.is_cuda else "cpu"]
    dtype = torch.bfloat16 if device.is_cuda else torch.float32
    a = torch.randn(size, size, device=device.torch_device, dtype=dtype)
    b = torch.randn(size, size, device=device.torch_device, dtype=dtype)
    fn = lambda: a @ b  # noqa: E731 - a named one-line lambda
    label = f"matmul {str(dtype).removeprefix('torch.')} {size}^3"
    return [engine_figure(f"{label}, cold, back to back", fn, device, cache="cold", pace="back_to_back"),
            engine_figure(f"{label}, cold, idle between samples", fn, device, cache="cold", pace="idle"),
            engine_figure(f"{label}, hot, back to back", fn, device, cache="hot", pace="back_to_back")]


def markdown(figures: list[Figure], device_name: str) -> str:
    lines = [f"# Gap probe on {device_name}", "",
             "| figure | median us | p10 | p90 | n | SM clock MHz | power W | how |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for f in figures:
        clock = f"{f.sm_clock_mhz:.0f}" if f.sm_clock_mhz is not None else "-"
        power = f"{f.power_w:.0f}" if f.power_w is not None else "-"
        lines.append(f"| {f.name} | {f.median_us:.1f} | {f.p10_us:.1f} | {f.p90_us:.1f} | {f.n} | {clock} | {power} "
                     f"| {f.note} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked (SystemExit with the message on a bad one); nothing is measured."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (the probe's purpose), or cpu: the same probes at CPU sizes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    on_gpu = device_kind_of(args.device) is DeviceKind.CUDA
    if on_gpu and not torch.cuda.is_available():
        print("SKIP: no CUDA device: the gap probe times GPU kernels (--device cpu tries it on the CPU)")
        return 3

    _, device = capture("cuda:0" if on_gpu else "cpu")
    figures = flush_probe(device) + pace_probe(device)
    text = markdown(figures, device.name)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"device": device.name, "figures": [asdict(f) for f in figures]}, indent=2))
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
