"""Projected wall time of the nightly spec on one H100 SXM, from its case list (a script, not a test).

    .venv/bin/python -m tests.perf.project_nightly                             # nightly.yaml, default model
    .venv/bin/python -m tests.perf.project_nightly --overhead-json after.json  # per-case host costs
                                                                               # measured by bench_overhead

No GPU is involved: every case's kernel time is the roofline time of its op's FLOP and byte models
at the H100 SXM datasheet rates (`reports.walls.predict`), at least the launch floor of its timing mode.
The timing engine's rules with the spec's settings then give each case's phases:

- per sample, GPU time = kernel time (+ the cache flush in cold mode: FLUSH_FACTOR x L2 written
  and read at the datasheet bandwidth); host time = HOST_PER_SAMPLE_MS; a sample costs the larger
  (batches are enqueued behind a blocking kernel, so host and GPU overlap);
- warmup = max(warmup_ms, warmup_calls samples); sampling = max(min_time_ms, min_samples and
  SAMPLES_TO_CONVERGE samples), at most max_time_ms; sampled time = samples x kernel time;
- fixed per case: host work (prepare, first calls, check, store, skip checks) from
  `--overhead-json` (bench_overhead's eager cases, median per case) or HOST_FIXED_MS, plus device
  work: inputs drawn once and the float64 check (CHECK_PASSES passes over the output bytes in
  float64) at the datasheet bandwidth, and the two first calls;
- compiled cases add a compile: COMPILE_COLD_S on a night with an empty Inductor cache,
  COMPILE_WARM_S with the cache kept under the nightly's output directory, and for the other
  cache/timing modes of a shape already compiled tonight;
- the check runs once per (op, backend, dtype, params) (the worker's verdict cache), the other
  cache/timing modes of the shape pay none;
- one worker start (WORKER_START_S).

It prints the totals, the overhead fraction (1 - sampled / wall) and the benchmarks that cost most.
The model's constants are printed with the result; see docs/gpu-hardware.md for what they rest on.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

HBM_GBPS = 3350.0  # H100 SXM datasheet
L2_BYTES = 50 * 1024 * 1024
FLUSH_FACTOR = 2  # runners.engine.flush: twice the L2, written then read
LAUNCH_FLOOR_MS = {"launch": 0.005, "graph": 0.002}  # a launch from Python; one launch inside a graph replay
HOST_PER_SAMPLE_MS = {"launch": 0.012, "graph": 0.004}  # Python dispatch + event pair per sample (graph: per launch)
SAMPLES_TO_CONVERGE = 100  # 0.5 % CI of the median at about 2 % sample noise: n = (1.25 * 1.96 * 0.02 / 0.005)^2
HOST_FIXED_MS = 40.0  # per case: prepare, first calls, store, skip checks, clock monitor (host side)
CHECK_PASSES = 12  # float64 passes over the output in the check (bytes of the output x 4 each way)
COMPILE_COLD_S = 20.0  # torch.compile of one case, empty Inductor cache (Triton compile + autotune of a few kernels)
COMPILE_WARM_S = 2.0  # Dynamo trace + FX graph cache hit + loading the cached kernels
WORKER_START_S = 15.0


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="nightly")
    parser.add_argument("--overhead-json", type=Path, default=None,
                        help="bench_overhead --json output: its eager cases' median host cost replaces HOST_FIXED_MS")
    parser.add_argument("--no-check-cache", action="store_true", help="every case runs its check (the old worker)")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--ranks", type=int, default=8,
                        help="the world size a collective's `ranks: all` takes (the GPUs of the node; default 8)")
    return parser.parse_args()


def host_fixed_ms_from(path: Path) -> float:
    """Median per-case host cost of the measured eager cases: everything but warmup, sampling and check."""
    rows = json.loads(path.read_text())["rows"]
    costs = []
    for r in rows:
        if r["status"] != "ok" or ":eager:" not in r["case"] or r.get("prepare_ms") is None:
            continue
        costs.append(r["wall_ms"] - r["warmup_ms"] - r["sampling_ms"] - (r["check_ms"] or 0.0))
    if not costs:
        raise SystemExit(f"{path}: no eager case with a phase split")
    return statistics.median(costs)


def project(spec_name: str, host_fixed_ms: float, check_cache: bool, ranks: int = 8) -> tuple[list[dict], dict]:
    from rooflab.reports.walls.predict import predict
    from rooflab.suite.ops.registry import get_op
    from rooflab.suite.spec import expand, load_spec

    spec = load_spec(spec_name)
    cases = expand(spec, "cuda")
    checked: set[str] = set()
    rows = []
    for case in cases:
        op = get_op(case.op)
        params = op.with_defaults(case.params)
        if params.get("ranks") == "all":
            params = {**params, "ranks": ranks}  # every GPU of the node (the run's --devices all)
        pred = predict(case.op, dict(params), case.dtype, "H100 SXM", cache=case.cache, timing_mode=case.timing_mode)
        mode = case.timing_mode
        t_ms = max(pred.roofline_ms, LAUNCH_FLOOR_MS[mode])
        flush_ms = FLUSH_FACTOR * L2_BYTES * 2 / (HBM_GBPS * 1e9) * 1e3 if case.cache == "cold" else 0.0
        per_sample_ms = max(t_ms + flush_ms, HOST_PER_SAMPLE_MS[mode])
        s = case.timing
        warmup_ms = max(s.warmup_ms, s.warmup_calls * per_sample_ms)
        n = max(s.min_samples, SAMPLES_TO_CONVERGE, int(s.min_time_ms / per_sample_ms))
        sampling_ms = min(s.max_time_ms, max(s.min_time_ms, n * per_sample_ms))
        n = int(sampling_ms / per_sample_ms)
        sampled_ms = n * t_ms
        out_bytes = pred.bytes / 3 if pred.bytes else 0  # about a third of the traffic is the output
        key = f"{case.op}:{case.backend}:{case.dtype}:{sorted(params.items())}"
        check_ms = 0.0
        if not check_cache or key not in checked:
            check_ms = CHECK_PASSES * out_bytes * 4 * 2 / (HBM_GBPS * 1e9) * 1e3  # float64 = 4x a 16-bit output
            checked.add(key)
        inputs_ms = pred.bytes / (HBM_GBPS * 1e9) * 1e3
        rows.append({
            "case": case.case_key, "benchmark": case.benchmark, "backend": case.backend, "kernel_ms": t_ms,
            "warmup_ms": warmup_ms, "sampling_ms": sampling_ms, "sampled_ms": sampled_ms,
            "fixed_ms": host_fixed_ms + check_ms + inputs_ms + 2 * t_ms,
            "flush_ms": n * flush_ms if per_sample_ms > HOST_PER_SAMPLE_MS[mode] else 0.0,
            "compiled": case.backend == "compiled", "compile_key": key, "collective": case.family == "collective",
        })
    totals = {"cases": len(rows), "check_cache": check_cache, "host_fixed_ms": host_fixed_ms}
    return rows, totals


def summarise(rows: list[dict], compile_s: float) -> dict:
    # one worker start, and one more for the rank group of the collectives (its processes start together)
    wall_ms = WORKER_START_S * 1e3 * (1 + any(r["collective"] for r in rows))
    sampled = warm = sampling = fixed = compile_ms = flush = 0.0
    compiled_keys: set[str] = set()
    for r in rows:
        c = 0.0
        if r["compiled"]:
            # the other cache/timing modes of a shape find its graph in the Inductor cache tonight
            c = (compile_s if r["compile_key"] not in compiled_keys else COMPILE_WARM_S) * 1e3
            compiled_keys.add(r["compile_key"])
        wall_ms += r["warmup_ms"] + r["sampling_ms"] + r["fixed_ms"] + c
        sampled += r["sampled_ms"]
        warm += r["warmup_ms"]
        sampling += r["sampling_ms"]
        fixed += r["fixed_ms"]
        flush += r["flush_ms"]
        compile_ms += c
    return {"wall_min": wall_ms / 60e3, "sampled_min": sampled / 60e3, "overhead_fraction": 1 - sampled / wall_ms,
            "warmup_min": warm / 60e3, "sampling_min": sampling / 60e3, "fixed_min": fixed / 60e3,
            "compile_min": compile_ms / 60e3, "flush_min": flush / 60e3}


def main() -> int:
    args = _parse()
    host_fixed = host_fixed_ms_from(args.overhead_json) if args.overhead_json else HOST_FIXED_MS
    rows, totals = project(args.spec, host_fixed, not args.no_check_cache, args.ranks)
    print(f"{totals['cases']} cases of {args.spec} on an H100 SXM (datasheet roofline times); "
          f"host fixed cost {host_fixed:.1f} ms per case; check cache {'on' if totals['check_cache'] else 'off'}")
    print(f"model: launch floor {LAUNCH_FLOOR_MS}, host per sample {HOST_PER_SAMPLE_MS}, "
          f"{SAMPLES_TO_CONVERGE} samples to converge, worker start {WORKER_START_S} s")
    for label, compile_s in (("empty Inductor cache", COMPILE_COLD_S), ("Inductor cache kept", COMPILE_WARM_S)):
        s = summarise(rows, compile_s)
        print(f"  {label:<22} wall {s['wall_min']:6.1f} min  sampled {s['sampled_min']:5.1f} min  "
              f"overhead {100 * s['overhead_fraction']:5.1f} %   [warmup {s['warmup_min']:.1f}, sampling "
              f"{s['sampling_min']:.1f} (of which cold flushes {s['flush_min']:.1f}), fixed {s['fixed_min']:.1f}, "
              f"compile {s['compile_min']:.1f} min]")
    by_bench: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        b = by_bench[r["benchmark"]]
        b[0] += r["warmup_ms"] + r["sampling_ms"] + r["fixed_ms"] + (COMPILE_WARM_S * 1e3 if r["compiled"] else 0)
        b[1] += r["sampled_ms"]
        b[2] += 1
    print(f"\n{'benchmark':<34} {'cases':>5} {'wall s':>8} {'sampled s':>9} {'overhead':>8}")
    for name, (wall, sampled, n) in sorted(by_bench.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{name:<34} {n:>5} {wall / 1e3:8.1f} {sampled / 1e3:9.1f} {100 * (1 - sampled / wall):7.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
