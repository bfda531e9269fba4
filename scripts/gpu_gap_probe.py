"""Why rooflab's cold figures differ from do_bench's and nvbench's: two measurements that test the
two explanations docs/crosscheck.md gives (a GPU script; on a machine without CUDA it says so and
exits with code 3, which scripts/gpu-validate.sh records as skipped).

1. Flush by reading or by writing. rooflab cleans the L2 before a cold sample by reading a buffer of
   twice its size (clean lines); do_bench and nvbench write one (dirty lines, which the timed kernel
   must write back). The same copy (float32, 2^26 elements) is timed by rooflab's engine twice, with
   its own read sweep and with a write sweep of the same buffer: if the explanation holds, the write
   sweep reads slower by about the gap to the peers (3-6 % on an H100).
2. Duty cycle. rooflab's cold samples run back to back; nvbench synchronises after each and pauses
   when the clock drops. A bf16 8192^3 GEMM is timed by rooflab's engine, then sample by sample with
   an idle gap of 0, 2 and 20 ms before each (L2 read-swept, CUDA events around the call), with the
   SM clock read (NVML) after every sample: if the explanation holds, the spaced samples read faster
   and at a higher clock than the back-to-back ones.

    python scripts/gpu_gap_probe.py --json out/gap-probe.json --markdown out/gap-probe.md
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

COPY_ELEMENTS = 1 << 26
GEMM_SIZE = 8192
GAPS_MS = (0.0, 2.0, 20.0)
SPACED_SAMPLES = 30


@dataclass(frozen=True)
class Figure:
    name: str
    median_us: float
    p10_us: float
    p90_us: float
    n: int
    sm_clock_mhz: float | None = None  # mean of the readings after each sample, where read
    note: str = ""


def figure(name: str, samples_ms: list[float], clocks_mhz: list[float] | None = None, note: str = "") -> Figure:
    """Median, p10 and p90 of `samples_ms` as rooflab summarises samples (runners.engine.stats.summarize),
    in us; the mean clock of `clocks_mhz`."""
    from rooflab.runners.engine.stats import summarize

    if not samples_ms:
        raise ValueError(f"{name}: no samples")
    s = summarize(tuple(samples_ms))
    clock = statistics.fmean(clocks_mhz) if clocks_mhz else None
    return Figure(name, 1e3 * s.median_ms, 1e3 * s.p10_ms, 1e3 * s.p90_ms, s.n_samples, clock, note)


class WriteFlusher:
    """Cleans the L2 as do_bench and nvbench do: by writing a buffer (zeros) as large as rooflab's."""

    flush_method = "write_sweep"

    def __init__(self, flush_bytes: int, torch_device: str) -> None:
        import torch

        self.flush_bytes = flush_bytes
        self._words = torch.empty(flush_bytes // 8, dtype=torch.int64, device=torch_device)

    def flush(self) -> None:
        self._words.zero_()


def _engine(fn: Any, device: Any, **kw: Any) -> Figure:
    from rooflab.runners.engine.timing import measure
    from rooflab.suite.timing import TimingSettings

    settings = TimingSettings(warmup_ms=25, warmup_calls=3, min_samples=30, min_time_ms=200, max_time_ms=3000,
                              target_precision=0.005)
    name = kw.pop("name")
    r = measure(fn, device=device, settings=settings, cache="cold", timing_mode="launch", **kw)
    how = r.method
    return figure(name, list(r.samples_ms),
                  note=f"rooflab's engine: flush {how.flush_method}, hold {how.sync_method}, stop {how.stop_reason}")


def flush_probe(device: Any) -> list[Figure]:
    import torch

    from rooflab.runners.engine.flush import CudaFlusher

    x = torch.randn(COPY_ELEMENTS, device=device.torch_device)
    y = torch.empty_like(x)
    read = CudaFlusher(device)
    write = WriteFlusher(read.flush_bytes, device.torch_device)
    fn = lambda: y.copy_(x)  # noqa: E731 - a named one-line lambda
    return [_engine(fn, device, flusher=read, name="copy f32 2^26, read-sweep flush (rooflab)"),
            _engine(fn, device, flusher=write, name="copy f32 2^26, write-sweep flush (as the peers)")]


def duty_probe(device: Any) -> list[Figure]:
    import torch

    from rooflab.runners.machine.clocks import NvmlClockSource
    from rooflab.runners.engine.flush import CudaFlusher

    a = torch.randn(GEMM_SIZE, GEMM_SIZE, device=device.torch_device, dtype=torch.bfloat16)
    b = torch.randn(GEMM_SIZE, GEMM_SIZE, device=device.torch_device, dtype=torch.bfloat16)
    fn = lambda: a @ b  # noqa: E731 - a named one-line lambda
    flusher = CudaFlusher(device)
    clock = NvmlClockSource.for_device(device)
    out = [_engine(fn, device, flusher=flusher, name=f"matmul bf16 {GEMM_SIZE}^3, back to back (rooflab)")]
    for gap_ms in GAPS_MS:
        samples, clocks = [], []
        for _ in range(SPACED_SAMPLES):
            torch.cuda.synchronize()
            time.sleep(gap_ms / 1e3)
            flusher.flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
            if clock is not None:
                clocks.append(clock.sm_clock_mhz())
        out.append(figure(f"matmul bf16 {GEMM_SIZE}^3, one sample after {gap_ms:g} ms idle", samples, clocks,
                          note="synchronised after every sample"))
    return out


def markdown(figures: list[Figure], device_name: str) -> str:
    lines = [f"# Gap probe on {device_name}", "", "| figure | median us | p10 | p90 | n | SM clock MHz | note |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for f in figures:
        clock = f"{f.sm_clock_mhz:.0f}" if f.sm_clock_mhz is not None else "-"
        lines.append(f"| {f.name} | {f.median_us:.1f} | {f.p10_us:.1f} | {f.p90_us:.1f} | {f.n} | {clock} | {f.note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device: the gap probe times GPU kernels")
        return 3
    from rooflab.runners.machine.environment import capture

    _, device = capture("cuda:0")
    figures = flush_probe(device) + duty_probe(device)
    text = markdown(figures, device.name)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"device": device.name, "figures": [asdict(f) for f in figures]}, indent=2))
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
