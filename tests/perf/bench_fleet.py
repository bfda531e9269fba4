"""A fleet's year on PostgreSQL (a script, not a timed test): 64 GPUs x 2,000 cases x 365 nights
generated straight into PostgreSQL, then each step of a fleet's night timed cold, in processes of its own.

    .venv/bin/python -m tests.perf.bench_fleet                                  # the full year (46.7 M results)
    .venv/bin/python -m tests.perf.bench_fleet --devices 16 --cases 500 --nights 60   # a few minutes
    .venv/bin/python -m tests.perf.bench_fleet --postgres URL --json fleet.json [--reuse] [--steps export]

The year (tests/perf/fleet_year.py: stable device offsets, night-to-night noise, two planted slow
GPUs, a driver update halfway) goes in with COPY, one night at a time. Then the steps, each a fresh
process (or processes) of its own, its wall time and the peak of its processes' summed resident
memory (sampled every 50 ms) measured; the goals are issue 48's (docs/database.md):

  ingest_night  the night after the year, devices x cases results, written the nightly's way: one
                process per node, each writing its shard as `rooflab run --shard I/N` writes
                (tests/perf/fleet_shard.py), all at once; timed from their start signal to the last end
  import_night  the same night as a file (`rooflab export --run`, Parquet) loaded by `rooflab import`
  fleet         `rooflab fleet` on the newest night, where this rooflab has the command
  regressions   `rooflab regressions --json --fail-on never`
  report        `rooflab report --out DIR`
  export        `rooflab export --format parquet` of the whole year

The night written by the first two steps is deleted again after each, so the year the others read is
the generated one. A step that outgrows `--max-mb` or `--step-timeout` is stopped, and the table says so.
Without `--postgres` the benchmark starts a PostgreSQL server of its own (tests/perf/pg_server.py)
and removes it at the end; `--postgres URL` names a database that is empty (the year is written into
it and left there) or, with `--reuse`, already holds this very year.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from rooflab.db.urls import normalize_url
from tests.perf.access_paths import explain, sample_params
from tests.perf.bench_history import _tree_rss_bytes
from tests.perf.fleet_shard import BACKLOG
from tests.perf.fleet_year import SUITE, FleetYear, run_id, write_year
from tests.perf.pg_server import temporary_server

# issue 48's goals: seconds and peak MB of each step
GOALS = {"ingest_night": (30.0, None), "import_night": (30.0, None), "fleet": (15.0, 2048.0),
         "regressions": (60.0, 2048.0), "report": (120.0, 2048.0), "export": (900.0, 2048.0)}
STEPS = tuple(GOALS)
HISTORY_NIGHTS = 60  # the nights of history `rooflab fleet` reads, and the access paths' "newest nights"
SAMPLE_S = 0.05
ROOT = Path(__file__).resolve().parents[2]  # the shard writers run as `-m tests.perf.fleet_shard` from here


@dataclass
class Step:
    """One step's figures: wall seconds and peak MB (None: it did not run to the end), and a note."""

    seconds: float | None
    peak_mb: float | None
    load: float  # the 1-minute load average when it started
    note: str = ""
    count: int | None = None  # what it stored, wrote or judged (results, rows, series, pages)


@dataclass
class Watched:
    """Processes run to their end (or stopped): wall seconds from the start, peak MB, exit codes, why stopped."""

    seconds: float
    peak_mb: float
    codes: list[int | None]
    stopped: str | None


def watch(procs: Sequence[subprocess.Popen], started: float, max_mb: float, timeout_s: float) -> Watched:
    """Wait for `procs`, sampling their summed resident memory; stop them all past `max_mb` or `timeout_s`."""
    peak, stopped = 0, None
    while any(p.poll() is None for p in procs):
        peak = max(peak, sum(_tree_rss_bytes(p.pid) for p in procs if p.poll() is None))
        elapsed = time.perf_counter() - started
        if peak > max_mb * 1e6 or elapsed > timeout_s:
            stopped = (f"stopped at {peak / 1e6:,.0f} MB (over --max-mb {max_mb:,.0f})" if peak > max_mb * 1e6
                       else f"stopped after {elapsed:,.0f} s (--step-timeout)")
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()
            break
        time.sleep(SAMPLE_S)
    return Watched(time.perf_counter() - started, peak / 1e6, [p.returncode for p in procs], stopped)


def rooflab(argv: list[str], args: argparse.Namespace) -> tuple[Watched, str]:
    """`python -m rooflab ARGV` in a process of its own, watched; its stdout (its stderr is shown when it fails)."""
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rooflab", *argv], stdout=stdout, stderr=stderr)
        watched = watch([proc], started, args.max_mb, args.step_timeout)
        if watched.codes != [0]:
            stderr.seek(0)
            print(f"    rooflab {argv[0]}: exit {watched.codes[0]}: {stderr.read()[-2000:]}", file=sys.stderr)
        stdout.seek(0)
        return watched, stdout.read()


def step_of(watched: Watched, load: float, note: str, count: int | None = None) -> Step:
    if watched.stopped:
        return Step(None, None, load, f"{watched.stopped}; {note}", count)
    failed = [code for code in watched.codes if code != 0]
    if failed:
        return Step(None, watched.peak_mb, load, f"exit {failed[0]}; {note}", count)
    return Step(watched.seconds, watched.peak_mb, load, note, count)


def sql(url: str, statement: str, **params: object) -> Any:
    """One statement in a transaction of its own (autocommit: CREATE DATABASE too); its first value."""
    engine = create_engine(normalize_url(url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            result = conn.execute(text(statement), params)
            return result.scalar() if result.returns_rows else None
    finally:
        engine.dispose()


def night_count(url: str, night: int) -> int:
    return int(sql(url, "SELECT count(*) FROM measurements m JOIN runs r ON r.id = m.run_id WHERE r.run_id = :run",
                   run=run_id(night)))


def drop_night(url: str, night: int) -> None:
    sql(url, "DELETE FROM runs WHERE run_id = :run", run=run_id(night))


def ingest_night(url: str, year: FleetYear, args: argparse.Namespace, workdir: Path) -> Step:
    """Every node's shard of the night after the year, written at once, each by a process of its own."""
    night = year.nights
    argv = [str(v) for v in ("--devices", year.devices, "--cases", year.cases, "--nights", year.nights,
                             "--gpus-per-node", year.gpus_per_node, "--seed", year.seed, "--night", night,
                             "--hold", args.hold)]
    procs = [subprocess.Popen([sys.executable, "-m", "tests.perf.fleet_shard", url, str(node), *argv], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for node in range(year.nodes)]
    for proc in procs:  # each has built its results
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    load = os.getloadavg()[0]
    started = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
    watched = watch(procs, started, args.max_mb, args.step_timeout)
    figures = []
    for proc in procs:
        assert proc.stdout is not None
        with proc.stdout:
            printed = proc.stdout.read()
        if proc.returncode == 0:
            figures.append(json.loads(printed))
    stored = night_count(url, night)
    slowest = max((f["write_s"] for f in figures), default=0.0)
    note = (f"{year.nodes} shard processes; {stored:,} results stored of {year.devices * year.cases:,}; "
            f"slowest shard {slowest:.1f} s")
    return step_of(watched, load, note, stored)


def import_night(url: str, year: FleetYear, args: argparse.Namespace, workdir: Path) -> Step:
    """The night the shards wrote, exported as a file, deleted, and loaded again by `rooflab import`."""
    night = year.nights
    path = workdir / f"{run_id(night)}.parquet"
    exported, _ = rooflab(["export", "--db", url, "--run", run_id(night), "--format", "parquet", "--out", str(path)],
                          args)
    if exported.codes != [0]:
        return Step(None, None, os.getloadavg()[0], "the night could not be exported for the import")
    drop_night(url, night)
    load = os.getloadavg()[0]
    watched, _ = rooflab(["import", str(path), "--db", url], args)
    stored = night_count(url, night)
    note = f"{stored:,} results stored from a {path.stat().st_size / 2**20:,.1f} MiB Parquet file"
    path.unlink()
    return step_of(watched, load, note, stored)


def fleet(url: str, year: FleetYear, args: argparse.Namespace, workdir: Path) -> Step:
    helped = subprocess.run([sys.executable, "-m", "rooflab", "fleet", "--help"], capture_output=True)
    if helped.returncode != 0:
        return Step(None, None, os.getloadavg()[0], "this rooflab has no `rooflab fleet`")
    load = os.getloadavg()[0]
    watched, out = rooflab(["fleet", "--db", url, "--suite", SUITE, "--json", "--fail-on", "never"], args)
    return step_of(watched, load, _fleet_note(out))


def _fleet_note(out: str) -> str:
    try:
        judged = json.loads(out)
    except json.JSONDecodeError:
        return "no JSON"
    return ", ".join(f"{k}: {v}" for k, v in sorted(judged.get("counts", {}).items())) or "judged"


def regressions(url: str, year: FleetYear, args: argparse.Namespace, workdir: Path) -> Step:
    load = os.getloadavg()[0]
    watched, out = rooflab(["regressions", "--db", url, "--json", "--fail-on", "never"], args)
    try:
        counts = json.loads(out)["counts"]
        note = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()) if v)
    except (json.JSONDecodeError, KeyError):
        counts, note = {}, "no JSON"
    return step_of(watched, load, note, sum(counts.values()) if counts else None)


def report(url: str, year: FleetYear, args: argparse.Namespace, workdir: Path) -> Step:
    out = workdir / "report"
    load = os.getloadavg()[0]
    watched, _ = rooflab(["report", "--db", url, "--out", str(out)], args)
    pages = list(out.rglob("*.html")) if out.exists() else []
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if out.exists() else 0
    return step_of(watched, load, f"{len(pages)} pages, {size / 2**20:,.1f} MiB", len(pages))


def export(url: str, year: FleetYear, args: argparse.Namespace, workdir: Path) -> Step:
    path = workdir / "year.parquet"
    load = os.getloadavg()[0]
    watched, _ = rooflab(["export", "--db", url, "--format", "parquet", "--out", str(path)], args)
    note, rows = "", None
    if path.exists():
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(path).metadata.num_rows
        note = f"{rows:,} rows, {path.stat().st_size / 2**20:,.0f} MiB"
        if not args.keep:
            path.unlink()
    return step_of(watched, load, note, rows)


STEP_RUNS: dict[str, Callable[[str, FleetYear, argparse.Namespace, Path], Step]] = {
    "ingest_night": ingest_night, "import_night": import_night, "fleet": fleet, "regressions": regressions,
    "report": report, "export": export}


def year_present(url: str, year: FleetYear) -> bool:
    """Whether the database holds this year: every night's run, and the newest night in full."""
    try:
        runs = sql(url, "SELECT count(*) FROM runs")
    except Exception:  # noqa: BLE001 - no tables: no year
        return False
    return runs == year.nights and night_count(url, year.nights - 1) == year.devices * year.cases


def database_bytes(url: str) -> int:
    return int(sql(url, "SELECT pg_database_size(current_database())"))


# the per-series state as the check of the night before left it (db.series_state): every run folded in
# but those of the newest LIVE_WINDOW and one day more, which tonight's check folds as a night's does
STATE_SCRIPT = """
import sys
from datetime import timedelta
from rooflab.db.handle import reading
from rooflab.db.series_facts import FactKind
from rooflab.db.series_state import LIVE_WINDOW, fold
with reading(sys.argv[1]) as engine:
    for kind in (FactKind.SUMMARY_BY_DEVICE, FactKind.METHODS_BY_DEVICE, FactKind.ENVIRONMENTS):
        print(kind, fold(engine, kind, live_window=LIVE_WINDOW + timedelta(days=1)))
"""


def state_of_the_night_before(url: str, args: argparse.Namespace) -> Watched:
    """The per-series state folded as the night before's check left it (untimed in the table: a
    database upgraded to it pays this once, in its first check)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", STATE_SCRIPT, url], cwd=ROOT)
    return watch([proc], started, args.max_mb, args.step_timeout)


def run_steps(url: str, year: FleetYear, args: argparse.Namespace, workdir: Path) -> dict[str, Step]:
    """The steps asked for, in the table's order; the night after the year is gone again after them."""
    steps: dict[str, Step] = {}
    for name in args.steps:
        if name in ("regressions", "report") and not any(s in steps for s in ("regressions", "report")):
            folded = state_of_the_night_before(url, args)
            print(f"  the state of the night before: {folded.seconds:.1f} s, {folded.peak_mb:,.0f} MB", flush=True)
        print(f"  {name} ...", flush=True)
        if name == "import_night" and "ingest_night" not in steps:
            ingest_night(url, year, args, workdir)  # the night to export and import
        steps[name] = STEP_RUNS[name](url, year, args, workdir)
        if name == "import_night" or (name == "ingest_night" and "import_night" not in args.steps):
            drop_night(url, year.nights)
        print(f"    {_row(name, steps[name])}", flush=True)
    return steps


def _row(name: str, step: Step) -> str:
    goal_s, goal_mb = GOALS[name]
    seconds = f"{step.seconds:8.1f}" if step.seconds is not None else f"{'-':>8}"
    peak = f"{step.peak_mb:8,.0f}" if step.peak_mb is not None else f"{'-':>8}"
    met = step.seconds is not None and step.seconds <= goal_s and (
        goal_mb is None or (step.peak_mb is not None and step.peak_mb <= goal_mb))
    goal = f"<= {goal_s:g} s" + (f", {goal_mb:,.0f} MB" if goal_mb else "")
    return f"{name:<13} {seconds} {peak} {step.load:5.1f}  {goal:<19} {'met' if met else 'MISSED':<6} {step.note}"


def print_table(year: FleetYear, steps: dict[str, Step], generate_s: float | None, size: int) -> None:
    made = f"generated in {generate_s:,.0f} s" if generate_s is not None else "reused"
    print(f"\n{year.devices} GPUs x {year.cases:,} cases x {year.nights} nights = {year.results:,} results "
          f"({made}; database {size / 2**30:,.2f} GiB); {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{'step':<13} {'seconds':>8} {'peak MB':>8} {'load':>5}  {'goal':<19} {'':<6} note")
    for name, step in steps.items():
        print(_row(name, step))


def benchmark(url: str, year: FleetYear, args: argparse.Namespace, workdir: Path) -> int:
    generate_s = None
    if not (args.reuse and year_present(url, year)):
        if sql(url, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"):
            print(f"{url}: the database is not empty (and does not hold this year for --reuse)", file=sys.stderr)
            return 2
        print(f"generating {year.results:,} results ...", flush=True)
        began = time.perf_counter()
        write_year(url, year, lambda line: print(f"  {line}", flush=True))
        generate_s = time.perf_counter() - began
    steps = run_steps(url, year, args, workdir)
    size = database_bytes(url)
    print_table(year, steps, generate_s, size)
    plans = explain(url, sample_params(url, min(HISTORY_NIGHTS, year.nights)))
    print(f"\n{'access path (EXPLAIN ANALYZE)':<52} {'ms':>9} {'rows':>10}  indexes")
    for plan in plans:
        print(f"{plan.name:<52} {plan.ms:9.1f} {plan.rows:10,}  {', '.join(plan.indexes) or 'none: a sequential scan'}")
    if args.json:
        args.json.write_text(json.dumps({
            "steps": {name: {"seconds": s.seconds, "peak_mb": s.peak_mb, "load": s.load, "note": s.note,
                             "count": s.count} for name, s in steps.items()},
            "results": year.results, "devices": year.devices, "cases": year.cases, "nights": year.nights,
            "generate_s": generate_s, "database_bytes": size,
            "access_paths": [{"name": p.name, "indexes": list(p.indexes), "expected": p.expected, "ms": p.ms,
                              "rows": p.rows} for p in plans]}, indent=2) + "\n")
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--postgres", metavar="URL", help="the database to use (default: a server of its own)")
    parser.add_argument("--reuse", action="store_true", help="with --postgres: keep the year the database holds")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--json", type=Path, metavar="FILE", help="write each step's seconds and peak MB here")
    parser.add_argument("--workdir", type=Path, help="for the files the steps write (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the year's Parquet export in --workdir")
    parser.add_argument("--hold", type=int, default=BACKLOG,
                        help=f"results a shard writes at once (default {BACKLOG}; 1: each alone, as a lane's "
                             "results arrive when each case takes longer than a write)")
    parser.add_argument("--max-mb", type=float, default=4000.0, help="stop a step past this peak (default 4000)")
    parser.add_argument("--step-timeout", type=float, default=3600.0, help="stop a step after this many seconds")
    args = parser.parse_args(argv)
    for name in ("devices", "cases", "nights", "gpus_per_node"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.reuse and not args.postgres:
        parser.error("--reuse needs --postgres URL (a server of the benchmark's own starts empty)")
    args.steps = [name for name in STEPS if name in args.steps]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    year = FleetYear(devices=args.devices, cases=args.cases, nights=args.nights, gpus_per_node=args.gpus_per_node,
                     seed=args.seed)
    with ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rooflab-fleet-")))
        workdir.mkdir(parents=True, exist_ok=True)
        url = args.postgres
        if url is None:
            os.chmod(workdir, 0o755)  # the server's user reaches its folder through it
            server = stack.enter_context(temporary_server(workdir / "pg"))
            sql(server, "CREATE DATABASE fleet")
            url = normalize_url(server).set(database="fleet").render_as_string(hide_password=False)
        return benchmark(url, year, args, workdir)


if __name__ == "__main__":
    sys.exit(main())
