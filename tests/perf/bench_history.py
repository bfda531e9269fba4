"""Scale benchmark of the results database: a year of nightlies (a script, not a test).

    .venv/bin/python -m tests.perf.bench_history                      # 365 runs x 2,000 cases x 3 GPUs
    .venv/bin/python -m tests.perf.bench_history --runs 30 --cases 500  # smaller
    .venv/bin/python -m tests.perf.bench_history --postgres URL        # also into PostgreSQL (a fresh db there)

It generates the history night by night into a fresh SQLite file through the bulk loader that
`rooflab import` and `rooflab db merge` use (one transaction per night), then times: importing one
night's CSV export with `rooflab import`'s code, single `ResultStore.add_measurement` calls, a
case-history query, one night's results as a DataFrame, a full CSV export, and pruning raw samples
older than 90 days; and prints the file size before and after.

Measured (2-core shared machine, SQLite): a year of nightlies, 365 runs x 2,000 cases x 3 GPUs =
2.19 M measurements with 25 raw samples each, loads in 163 s (74 us per measurement) into a
1.16 GiB file; one night's CSV imports in 1.1 s (0.5 s a second time, adding nothing); a case's
history on one GPU takes 0.04-0.07 s; one night's results 0.4 s; a full CSV export (2.2 M rows,
1.6 GiB) 207 s; pruning samples older than 90 days takes 16 s and shrinks the file to 807 MiB. On
PostgreSQL (measured at 10 nights, 60,000 measurements): 106 us per measurement for the bulk load,
3.6 ms for a single committed result, 0.04 s for a case's history. On the full year, the reports
read only what they need: `rooflab regressions` takes 11.8 s (656 MB peak), `rooflab roofline
--device` 10.4 s (1.3 GB); `rooflab report` took 94 s (7.0 GB) while it read every result, before
it read only the runs its pages show (below).

`--samples 0 --report DIR --report-only` (the year above, no raw samples, 710 MiB of SQLite):
`rooflab report` with its history pages took 14.7 and 14.5 s wall, 23 s of CPU in its two
processes, 853-855 MB at the peak of both together, at load 1.6 on the 2-core machine (52-53 s wall
at load 5-8); each device's history page, 13.2 MiB, was drawn in Chromium in 307-344 ms
(docs/history.md).
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

T0 = datetime(2025, 1, 1, 1, 0, tzinfo=UTC)
OPS = ("copy", "scale", "add", "triad", "gelu", "softmax", "layernorm", "matmul", "attention", "sum")
GPUS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200")


def _timed(label: str, fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run fn; print wall time and this process's CPU time (the machine may be shared)."""
    start, cpu = time.perf_counter(), time.process_time()
    value = fn()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"  {label:<48} {elapsed:9.2f} s wall {cpu:9.2f} s cpu", flush=True)
    return value, elapsed


def _cases(n: int) -> list[dict[str, Any]]:
    cases = []
    for i in range(n):
        op = OPS[i % len(OPS)]
        params = {"m": 256 * (1 + i % 16), "n": 128 * (i + 1), "k": 4096} if op == "matmul" else {"n": 4096 * (i + 1)}
        cache = "hot" if i % 5 == 0 else "cold"
        key = f"{op}.v1:eager:bfloat16:{cache}:launch:" + ",".join(f"{k}={params[k]}" for k in sorted(params))
        cases.append({"case_key": key, "op": op, "op_version": 1, "family": "gemm" if op == "matmul" else "pointwise",
                      "backend": "eager", "dtype": "bfloat16", "params": params, "_cache": cache})
    return cases


def _environments(gpus: int) -> list[dict[str, Any]]:
    envs = []
    for g in range(gpus):
        name = GPUS[g % len(GPUS)]
        envs.append({"device_fingerprint": f"fp{g:02d}{abs(hash(name)) % 10**8:08d}", "device_name": name,
                     "device_kind": "cuda", "identity": {"name": name}, "memory_bytes": 80 << 30,
                     "l2_bytes": 50 << 20, "sm_count": 132, "compute_capability": "9.0", "driver_version": "575.51",
                     "cuda_version": "13.0", "torch_version": "2.11.0", "first_seen_at": T0})
    return envs


def night_batch(night: int, cases: list[dict[str, Any]], envs: list[dict[str, Any]], samples: int, rng: random.Random):
    from rooflab.db.load import Batch
    from rooflab.db.samples import pack

    started = T0 + timedelta(days=night, seconds=rng.randint(0, 600))
    run_id = f"nightly-{started:%Y%m%d}"
    batch = Batch()
    batch.runs[run_id] = {"run_id": run_id, "suite": "nightly", "spec_text": "name: nightly\n", "spec_hash": "ab" * 32,
                          "started_at": started, "finished_at": started + timedelta(hours=2), "status": "complete",
                          "host": "node01", "git_commit": f"{rng.getrandbits(160):040x}", "git_dirty": False,
                          "command_line": "rooflab nightly", "rooflab_version": "0.1.0"}
    for env in envs:
        batch.environments[env["device_fingerprint"]] = env
        uuid = "GPU-" + env["device_fingerprint"]
        batch.run_environments[(run_id, env["device_fingerprint"], uuid)] = {
            "device_uuid": uuid, "info": {"uuid": uuid}}
    for case in cases:
        batch.cases[case["case_key"]] = {k: v for k, v in case.items() if not k.startswith("_")}
    for env in envs:
        uuid = "GPU-" + env["device_fingerprint"]
        for case in cases:
            median = rng.uniform(0.005, 20.0)
            values = [median * rng.uniform(0.97, 1.05) for _ in range(samples)]
            flops, nbytes = rng.randint(1, 10**13), rng.randint(1, 10**11)
            row = {
                "device_key": uuid, "device_uuid": uuid, "shard": None, "cache": case["_cache"],
                "timing_mode": "launch",
                "status": "ok", "error": None, "clock": "cuda_events", "measured_at": started + timedelta(minutes=30),
                "median_ms": median, "mean_ms": median * 1.01, "min_ms": median * 0.97, "max_ms": median * 1.05,
                "p10_ms": median * 0.98, "p90_ms": median * 1.03, "iqr_ms": median * 0.02, "std_ms": median * 0.015,
                "n_samples": samples, "rel_ci_halfwidth": 0.004, "stop_reason": "converged", "first_call_ms": 3.0,
                "warmup_calls": 10, "launches_per_sample": 1, "flush_bytes": 100 << 20, "flops": flops, "bytes": nbytes,
                "intensity": flops / nbytes, "tflops": flops / (median * 1e-3) / 1e12,
                "gbps": nbytes / (median * 1e-3) / 1e9,
                "sm_clock_start_mhz": 1980.0, "sm_clock_end_mhz": 1965.0, "sm_clock_max_mhz": 1980.0,
                "throttle_reasons": [], "throttled": False,
            }
            sample = (samples, pack(values)) if samples else None
            batch.measurements.append((run_id, case["case_key"], env["device_fingerprint"], row, sample))
    return batch


def _size(url: str) -> str:
    if not url.startswith("sqlite:///"):
        from sqlalchemy import text

        from rooflab.db.engine import make_engine

        engine = make_engine(url, write=False)
        with engine.connect() as conn:
            size = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
        engine.dispose()
        return f"{size / 2**20:,.1f} MiB"
    path = Path(url.removeprefix("sqlite:///"))
    total = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    return f"{total / 2**20:,.1f} MiB"


def run_benchmark(url: str, args: argparse.Namespace, workdir: Path) -> None:
    from rooflab.db import query
    from rooflab.db.export import export
    from rooflab.db.handle import open_for_writing
    from rooflab.db.importer import import_file
    from rooflab.db.load import load
    from rooflab.db.prune import prune_samples
    from rooflab.db.store import ResultStore
    from tests.db.factories import make_case, make_env, make_measurement, make_run

    rng = random.Random(args.seed)
    cases, envs = _cases(args.cases), _environments(args.gpus)
    n_rows = args.runs * args.cases * args.gpus
    print(f"\n{url.split('@')[-1]}: {args.runs} runs x {args.cases} cases x {args.gpus} GPUs = "
          f"{n_rows:,} measurements, {args.samples} raw samples each", flush=True)
    engine = open_for_writing(url)
    start, cpu_start = time.perf_counter(), time.process_time()
    generate_s = generate_cpu = 0.0
    for night in range(args.runs):
        g0, c0 = time.perf_counter(), time.process_time()
        batch = night_batch(night, cases, envs, args.samples, rng)
        generate_s += time.perf_counter() - g0
        generate_cpu += time.process_time() - c0
        with engine.begin() as conn:
            load(conn, batch)
        if (night + 1) % max(1, args.runs // 10) == 0:
            done = time.perf_counter() - start
            print(f"    night {night + 1:4d}/{args.runs}: {done:8.1f} s elapsed ({done - generate_s:.1f} s loading), "
                  f"{_size(url)}", flush=True)
    total, cpu_total = time.perf_counter() - start, time.process_time() - cpu_start
    engine.dispose()
    print(f"  {'bulk load, one transaction per night':<48} {total - generate_s:9.2f} s wall "
          f"{cpu_total - generate_cpu:9.2f} s cpu ({(total - generate_s) / n_rows * 1e6:.1f} us/measurement wall; "
          f"generating the rows took {generate_s:.1f} s more)")
    print(f"  {'database size':<48} {_size(url):>9}")
    if args.report is not None:
        time_report(url, args.report)
    if args.report_only:
        return

    # one more night as a CSV export, imported with `rooflab import`'s code
    extra = f"sqlite:///{workdir / 'one-night.db'}"
    e = open_for_writing(extra)
    with e.begin() as conn:
        load(conn, night_batch(args.runs, cases, envs, 0, rng))
    e.dispose()
    night_csv = workdir / "one-night.csv"
    export(extra, "csv", night_csv)
    result, _ = _timed(f"import one night's CSV ({args.cases * args.gpus:,} rows)", lambda: import_file(url, night_csv))
    assert result.counts.measurements == args.cases * args.gpus
    _, again = _timed("import the same file again (adds nothing)", lambda: import_file(url, night_csv))

    # single writes as a runner makes them
    run, env = make_run("latency-probe"), make_env(0)
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        probes = [make_measurement(run, make_case(i), env, n_samples=args.samples or 1)
                  for i in range(args.single_writes)]
        _, single = _timed(f"{args.single_writes} x ResultStore.add_measurement",
                           lambda: [store.add_measurement(m) for m in probes])
    print(f"  {'  -> per measurement (one transaction each)':<48} {single / args.single_writes * 1e3:9.2f} ms")

    key, fingerprint = cases[len(cases) // 2]["case_key"], envs[0]["device_fingerprint"]
    history, t = _timed("case_history(case, device) (first call)", lambda: query.case_history(url, key, fingerprint))
    assert len(history) == args.runs + 1 and history["run_order"].is_monotonic_increasing
    _timed("case_history(case, device) (again)", lambda: query.case_history(url, key, fingerprint))
    _timed("case_history(case) on all GPUs", lambda: query.case_history(url, key))
    last = history["run_id"].iloc[-2]
    frame, _ = _timed("results(run_id=one night) as a DataFrame", lambda: query.results(url, run_id=last))
    assert len(frame) == args.cases * args.gpus
    _timed("runs() as a DataFrame", lambda: query.runs(url))
    out = workdir / "full.csv"
    rows, _ = _timed("full export to CSV", lambda: export(url, "csv", out))
    print(f"  {'  -> rows, file size':<48} {rows:>9,} rows, {out.stat().st_size / 2**20:,.1f} MiB")
    out.unlink()
    if args.parquet:
        pq_out = workdir / "full.parquet"
        _timed("full export to Parquet", lambda: export(url, "parquet", pq_out))
        print(f"  {'  -> file size':<48} {pq_out.stat().st_size / 2**20:,.1f} MiB")
        pq_out.unlink()
    if args.samples:
        now = T0 + timedelta(days=args.runs)
        pruned, _ = _timed("prune samples older than 90 days (+ VACUUM)",
                           lambda: prune_samples(url, timedelta(days=90), vacuum=True, now=now))
        print(f"  {'  -> removed':<48} {pruned.measurements:,} sample rows of {pruned.runs} runs "
              f"({pruned.bytes / 2**20:,.1f} MiB of blobs)")
        print(f"  {'database size after prune':<48} {_size(url):>9}")
        _timed("case_history(case, device) after prune", lambda: query.case_history(url, key, fingerprint))


def _tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            rss[int(entry.name)] = int((entry / "statm").read_text().split()[1]) * 4096
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def time_report(url: str, out: Path) -> None:
    """`rooflab report` on the history as a user runs it (a process of its own, which starts one
    more): wall time, CPU time of both, the peak of their summed resident memory (sampled every
    50 ms) and the load average; then each history page opened in headless Chromium (its ready
    time: the page's own mark once its table is drawn)."""
    import os
    import subprocess

    load_before = os.getloadavg()
    start, cpu = time.perf_counter(), os.times()
    proc = subprocess.Popen([sys.executable, "-m", "rooflab", "report", "--db", url, "--out", str(out)],
                            stdout=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_bytes(proc.pid))
        time.sleep(0.05)
    wall, done = time.perf_counter() - start, os.times()
    used = (done.children_user - cpu.children_user) + (done.children_system - cpu.children_system)
    print(f"  {'rooflab report (exit ' + str(proc.returncode) + ')':<48} {wall:9.2f} s wall {used:9.2f} s cpu, "
          f"peak {peak / 1e6:,.0f} MB (all its processes), load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    pages = sorted(out.glob("history*.html"))
    for page in pages:
        size = page.stat().st_size
        ready = _ready_ms(page) if size > 10_000 else None
        shown = f"ready in {ready:.0f} ms" if ready is not None else "an index of the device pages"
        print(f"  {'  ' + page.name[:44]:<48} {size / 2**20:9.1f} MiB, {shown}")


def _ready_ms(page: Path) -> float | None:
    """ms from navigation to the history page's own 'history-ready' mark in headless Chromium."""
    from tests.reports.cdp import CHROMIUM, Browser

    if CHROMIUM is None:
        return None
    with Browser() as b:
        b.open(page.as_uri())
        ready = b.js("performance.getEntriesByName('history-ready')[0].startTime")
        if b.console or b.exceptions:
            print(f"    console: {b.console} {b.exceptions}")
        return float(ready)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=365, help="nightly runs (default 365)")
    parser.add_argument("--cases", type=int, default=2000, help="cases per run (default 2000)")
    parser.add_argument("--gpus", type=int, default=3, help="GPUs per run (default 3)")
    parser.add_argument("--samples", type=int, default=25, help="raw samples per measurement (default 25; 0: none)")
    parser.add_argument("--single-writes", type=int, default=300, help="single add_measurement calls to time")
    parser.add_argument("--parquet", action="store_true", help="also time a full Parquet export")
    parser.add_argument("--postgres", metavar="URL", help="also run against a fresh database on this PostgreSQL server")
    parser.add_argument("--dir", type=Path, help="where to put the SQLite file (default: a temporary directory)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="also time `rooflab report --out DIR` on the history and open its history pages")
    parser.add_argument("--report-only", action="store_true",
                        help="after the bulk load, time only the report (with --report)")
    args = parser.parse_args(argv)
    for name in ("runs", "cases", "gpus"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.report_only and args.report is None:
        parser.error("--report-only needs --report DIR")
    with (nullcontext(str(args.dir)) if args.dir else tempfile.TemporaryDirectory(prefix="rooflab-bench-")) as folder:
        workdir = Path(folder)
        workdir.mkdir(parents=True, exist_ok=True)
        db = workdir / "history.db"
        for path in workdir.glob("*.db*"):
            path.unlink()
        run_benchmark(f"sqlite:///{db}", args, workdir)
        if args.postgres:
            import os

            from tests.db.pg import ENV_VAR, fresh_postgres_url

            os.environ[ENV_VAR] = args.postgres
            with fresh_postgres_url() as url:
                for path in workdir.glob("one-night*"):
                    path.unlink()
                run_benchmark(url, args, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
