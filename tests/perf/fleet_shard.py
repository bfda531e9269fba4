"""One node's shard of a fleet's night, written the way `rooflab run --shard I/N` writes it (the
ingest step of tests/perf/bench_fleet.py).

    python -m tests.perf.fleet_shard URL NODE --devices 64 --cases 2000 --nights 365 --night 365

Builds the node's results (tests/perf/fleet_year.py `shard_records`: what its supervisor receives
from its workers), prints `ready` and waits for a line on stdin; then does what the shard's run does
to the database: starts its shard of the night's run, adds its devices, writes the results as the
supervisor writes them (`ResultStore.add_measurements`, `--hold` at a time: 1 as a lane's results
arrive one by one, more as a backlog of results received together is written), finishes the
shard, and prints its figures as JSON (`results`, `written`, `write_s`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from rooflab.db.store import ResultStore
from rooflab.vocab import RunStatus
from tests.perf.fleet_year import FleetYear, case_table, environment, host, run_record, shard_records

BACKLOG = 500  # results written in one transaction by default: a backlog written at once


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("node", type=int)
    for name, default in (("devices", 64), ("cases", 2000), ("nights", 365), ("gpus-per-node", 8), ("seed", 0)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--night", type=int, required=True, help="the night to write (0-based)")
    parser.add_argument("--hold", type=int, default=BACKLOG,
                        help=f"results written together (default {BACKLOG}; 1: one by one)")
    args = parser.parse_args(argv)
    year = FleetYear(devices=args.devices, cases=args.cases, nights=args.nights, gpus_per_node=args.gpus_per_node,
                     seed=args.seed)
    records = list(shard_records(year, case_table(year), args.night, args.node))
    devices = range(args.node * year.gpus_per_node, min(year.devices, (args.node + 1) * year.gpus_per_node))
    envs = [environment(year, args.night >= year.update_night, device) for device in devices]
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    shard = f"{args.node}/{year.nodes}"
    written = 0
    with ResultStore(args.url) as store:
        run = dataclasses.replace(run_record(args.night), host=host(args.node))  # the shard's node
        store.start_run(run, shard=shard)
        for env in envs:
            store.add_environment(run.run_id, env)
        for first in range(0, len(records), args.hold):
            written += sum(store.add_measurements(records[first:first + args.hold]))
        store.finish_run(run.run_id, RunStatus.COMPLETE, shard=shard)
    print(json.dumps({"results": len(records), "written": written, "write_s": time.perf_counter() - start}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
