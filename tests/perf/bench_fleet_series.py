"""Series per physical device on a fleet, at full size (a script, not a test).

    .venv/bin/python -m tests.perf.bench_fleet_series                  # 64 GPUs x 8 nodes x 30 nights x 5 cases
    .venv/bin/python -m tests.perf.bench_fleet_series --seeds 20       # the verdicts over 20 fleets
    .venv/bin/python -m tests.perf.bench_fleet_series --postgres URL   # into a fresh database there too

What a cluster's health nights leave behind (tests/reports/fleet_history.py: every GPU with a stable
offset of its own and night-to-night noise; one GPU on node 4 runs its HBM cases `--slow` times longer
on its last `--slow-nights` nights) is written as one export file and loaded the way a user loads it,
`rooflab import` in a process of its own; then `rooflab regressions --json --all` is run by device and
`--by model`, each in a process of its own, timed (wall, and peak resident memory from /proc). Each
fleet's verdicts are checked: by device, the slow GPU's HBM series regressions and every other series
ok; by model, one series per case. The first fleet is timed, the others (`--seeds`) only judged, in
process (reports.regressions.series.detect on the same rows: the verdicts `rooflab regressions`
gives, as tests/reports/regressions/test_regressions_db.py holds).
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
from pathlib import Path

import pandas as pd

from rooflab.reports.regressions.series import detect
from rooflab.vocab import SeriesBy
from tests.perf.bench_history import _tree_rss_bytes
from tests.reports.fleet_history import HEALTH, Fleet, fleet_rows, write_export


def _timed(label: str, argv: list[str]) -> str:
    """Run `python -m rooflab ARGV` in a process of its own: its stdout; print wall and peak memory."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as out:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rooflab", *argv], stdout=out)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss_bytes(proc.pid))
            time.sleep(0.05)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    print(f"  {label:<44} {wall:7.2f} s wall, peak {peak / 1e6:,.0f} MB, exit {proc.returncode}, load {load:.1f}",
          flush=True)
    return text


def _check_device(series: list[dict], fleet: Fleet) -> str:
    hbm = {c.case_key for c in fleet.cases if c.hbm}
    slow = {s["case_key"]: s["status"] for s in series if s["device_key"] == fleet.slow_uuid}
    others = [s for s in series if not (s["device_key"] == fleet.slow_uuid and s["case_key"] in hbm)]
    named = sum(slow.get(k) == "regression" for k in hbm)
    false = sum(s["status"] != "ok" or bool(s["drift"]) for s in others)
    return f"{len(series)} series; slow GPU's HBM series named {named}/{len(hbm)}; other series not ok {false}"


def _judged(fleet: Fleet, by: SeriesBy) -> list[dict]:
    frame = pd.DataFrame(fleet.rows)
    frame["run_order"] = frame["started_at"].rank(method="dense").astype(int)
    return [v.as_dict() for v in detect(frame, by=by)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--per-host", type=int, default=8)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--slow", type=float, default=1.10, help="the slow GPU's HBM time factor (default 1.10)")
    parser.add_argument("--slow-nights", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=1, help="fleets to judge (the first one also timed)")
    parser.add_argument("--postgres", metavar="URL", help="also into a fresh database on this PostgreSQL server")
    args = parser.parse_args()
    kw = dict(hosts=args.hosts, per_host=args.per_host, nights=args.nights, slow_factor=args.slow,
              slow_from=args.nights - args.slow_nights)
    print(f"{args.hosts * args.per_host} GPUs on {args.hosts} nodes, {args.nights} nights, {len(HEALTH)} cases; "
          f"Python {platform.python_version()}, {platform.machine()}", flush=True)
    fleet = fleet_rows(seed=0, **kw)
    with tempfile.TemporaryDirectory(prefix="rooflab-fleet-") as folder:
        path = write_export(fleet.rows, Path(folder) / "fleet.csv")
        urls = [f"sqlite:///{Path(folder) / 'fleet.db'}"]
        if args.postgres:
            from tests.db.pg import ENV_VAR, fresh_postgres_url

            os.environ[ENV_VAR] = args.postgres
            pg = fresh_postgres_url()
            urls.append(pg.__enter__())
        for url in urls:
            print(f"{url.split(':', 1)[0]}: {len(fleet.rows):,} results", flush=True)
            _timed("rooflab import", ["import", str(path), "--db", url])
            out = _timed("rooflab regressions --json --all", ["regressions", "--db", url, "--json", "--all",
                                                                 "--fail-on", "never"])
            print(f"    by device: {_check_device(json.loads(out)['series'], fleet)}")
            out = _timed("rooflab regressions --by model --json --all",
                            ["regressions", "--db", url, "--json", "--all", "--by", "model", "--fail-on", "never"])
            model = json.loads(out)["series"]
            print(f"    by model: {len(model)} series, statuses {sorted({s['status'] for s in model})}")
        if args.postgres:
            pg.__exit__(None, None, None)
    for seed in range(1, args.seeds):
        other = fleet_rows(seed=seed, **kw)
        print(f"  seed {seed}: {_check_device(_judged(other, SeriesBy.DEVICE), other)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
