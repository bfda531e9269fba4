"""What each cache flush costs a cold copy and triad on this CPU (a script, not a test).

    .venv/bin/python -m tests.perf.bench_flush                   # 0.5x .. 32x the LLC, 11 rounds
    .venv/bin/python -m tests.perf.bench_flush --rounds 5 --multiples 0.5,1,2 --json out.json
    .venv/bin/python -m tests.perf.bench_flush --cache-bytes 2097152   # sized against another cache
    .venv/bin/python -m tests.perf.bench_flush --threads 1            # one thread (a loaded machine)

The working set of each case (copy: 2 arrays, triad: 3; float32) is a multiple of the cache size
(`--cache-bytes`, default the last-level cache the machine reports, as the environment capture
records it). Every case is timed three ways, in one run, sample by sample in turn: behind rooflab's
write flush (runners.engine.flush, `write_sweep`), behind its read flush (`read_sweep`), both over
the same buffer of FLUSH_FACTOR x the LLC, and hot (right behind a call of itself on the same
data). A sample is the engine's own (runners.engine.timers.PerfCounterSource: flush, clock, call,
clock). Printed per case and way: the median with its p10-p90 range and the 95 % CI half-width of
the median, the rate in GB/s, and the ratios write / read and write / hot of the medians. The cost
of one flush of each kind, at 1x and at FLUSH_FACTOR x the LLC, is timed the same way.

A case whose arrays and the flush buffer together exceed `--max-gib` is not run and is printed as
such. Check the load first (`cat /proc/loadavg`): the script prints it before and after.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

OPS = {"copy": 2, "triad": 3}  # arrays each op touches (bytes = arrays x n x 4)
WAYS = ("write_sweep", "read_sweep", "hot")
GIB = 1 << 30


@dataclass(frozen=True)
class Row:
    op: str
    multiple: float
    working_set_bytes: int
    way: str
    median_ms: float | None
    p10_ms: float | None
    p90_ms: float | None
    rel_ci_halfwidth: float | None
    gbps: float | None
    n: int
    note: str = ""


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="ascii").split()[:3])
    except OSError:
        return "unknown"


def _op(name: str, n: int) -> Callable[[], Any]:
    import torch

    gen = torch.Generator().manual_seed(n)
    a = torch.rand(n, generator=gen)
    b = torch.rand(n, generator=gen)
    if name == "copy":
        return lambda: b.copy_(a)
    c = torch.rand(n, generator=gen)
    return lambda: torch.add(b, c, alpha=3.0, out=a)


def _timed(samples: dict[str, list[float]], way: str, fn: Callable[[], Any], flushers: dict[str, Any]) -> None:
    from rooflab.runners.engine.timers import PerfCounterSource

    source = PerfCounterSource(fn, flusher=flushers.get(way), sync=None)
    samples[way].extend(source.take_batch(1))


def measure_case(op: str, multiple: float, cache_bytes: int, flushers: dict[str, Any], rounds: int) -> list[Row]:
    from rooflab.runners.engine.stats import summarize

    nbytes = int(multiple * cache_bytes)
    n = max(1024, nbytes // (OPS[op] * 4))
    fn = _op(op, n)
    fn()  # first call: pages touched, kernels chosen
    samples: dict[str, list[float]] = {w: [] for w in WAYS}
    for _ in range(rounds):  # alternating: whatever the machine does meanwhile hits the three alike
        for way in WAYS:
            _timed(samples, way, fn, flushers)
    rows = []
    for way in WAYS:
        s = summarize(tuple(samples[way]))
        rows.append(Row(op, multiple, OPS[op] * n * 4, way, s.median_ms, s.p10_ms, s.p90_ms, s.rel_ci_halfwidth,
                        OPS[op] * n * 4 / (s.median_ms * 1e6), s.n_samples))
    return rows


def flush_costs(device: Any, rounds: int) -> list[Row]:
    """One flush of each kind at 1x and FLUSH_FACTOR x the device's cache, timed as a sample is."""
    from rooflab.runners.engine.flush import FLUSH_FACTOR, make_flusher
    from rooflab.runners.engine.stats import summarize
    from rooflab.runners.engine.timers import PerfCounterSource

    rows = []
    for factor in (1, FLUSH_FACTOR):
        write = make_flusher(device, "write_sweep", factor * device.l2_bytes)
        for flusher in (write, write.using("read_sweep")):
            s = summarize(tuple(PerfCounterSource(flusher.flush, flusher=None, sync=None).take_batch(rounds)))
            rows.append(Row("flush", float(factor), flusher.flush_bytes, flusher.flush_method, s.median_ms, s.p10_ms,
                            s.p90_ms, s.rel_ci_halfwidth, flusher.flush_bytes / (s.median_ms * 1e6), s.n_samples))
        del write
    return rows


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[Row]) -> str:
    lines = ["| op | x cache | working set MiB | way | median ms | p10-p90 ms | CI95 +- | GB/s | write / this |",
             "|---|---:|---:|---|---:|---|---:|---:|---:|"]
    writes = {(r.op, r.multiple): r.median_ms for r in rows if r.way == "write_sweep"}
    for r in rows:
        if r.median_ms is None:
            lines.append(f"| {r.op} | {r.multiple:g} | {r.working_set_bytes / (1 << 20):.0f} | {r.way} | not run: "
                         f"{r.note} | | | | |")
            continue
        w = writes.get((r.op, r.multiple))
        ratio = f"{w / r.median_ms:.3f}" if w and r.way != "write_sweep" and r.op != "flush" else ""
        lines.append(f"| {r.op} | {r.multiple:g} | {r.working_set_bytes / (1 << 20):.0f} | {r.way} | "
                     f"{r.median_ms:.3f} | {_fmt(r.p10_ms, '.3f')}-{_fmt(r.p90_ms, '.3f')} | "
                     f"{_fmt(None if r.rel_ci_halfwidth is None else 100 * r.rel_ci_halfwidth, '.1f')} % | "
                     f"{_fmt(r.gbps, '.2f')} | {ratio} |")
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multiples", default="0.5,1,2,8,32", help="working sets as multiples of the cache")
    parser.add_argument("--ops", default="copy,triad")
    parser.add_argument("--rounds", type=int, default=11, help="samples per case and way (taken in turn)")
    parser.add_argument("--cache-bytes", type=int, default=None, help="size the working sets against this cache "
                                                                       "(default: the reported LLC)")
    parser.add_argument("--max-gib", type=float, default=5.0, help="skip a case whose arrays + flush exceed this")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default torch's: one per core; 1 keeps a small op from "
                             "waiting on a second thread that another process holds)")
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import torch

    from rooflab.runners.engine.flush import make_flusher
    from rooflab.runners.machine.environment import capture

    args = _parse(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    load_before = _load()
    _, device = capture("cpu")
    cache = args.cache_bytes or device.l2_bytes
    write = make_flusher(device, "write_sweep")
    flushers = {"write_sweep": write, "read_sweep": write.using("read_sweep")}
    started = datetime.now(UTC)
    mib = 1 << 20
    head = (f"# Flush benchmark on {device.name}\n\n{started:%Y-%m-%d %H:%M} UTC; torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, Python {platform.python_version()}; LLC {device.l2_bytes / mib:.0f} "
            f"MiB, working sets against {cache / mib:g} MiB; flush buffer {write.flush_bytes / mib:.0f} "
            f"MiB; {args.rounds} rounds; load average before: {load_before}")
    print(head, flush=True)
    rows: list[Row] = []
    t0 = time.monotonic()
    for op in args.ops.split(","):
        for multiple in (float(m) for m in args.multiples.split(",")):
            need = multiple * cache + write.flush_bytes
            if need > args.max_gib * GIB:
                note = f"needs {need / GIB:.1f} GiB with the flush buffer, above --max-gib {args.max_gib:g}"
                rows += [Row(op, multiple, int(multiple * cache), way, None, None, None, None, None, 0, note)
                         for way in WAYS]
                continue
            rows += measure_case(op, multiple, cache, flushers, args.rounds)
            print(f"  {op} {multiple:g}x done ({time.monotonic() - t0:.0f} s, load {_load()})", file=sys.stderr,
                  flush=True)
    del flushers, write
    rows += flush_costs(device, args.rounds)
    text = f"{head}; after: {_load()}; {time.monotonic() - t0:.0f} s\n\n{table(rows)}\n"
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"header": head, "device": device.name,
                                         "rows": [asdict(r) for r in rows]}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
