"""Where a run's wall time goes: sampled time against everything else, per case (a script, not a test).

    .venv/bin/python -m tests.perf.bench_overhead                         # quick spec, CPU cases
    .venv/bin/python -m tests.perf.bench_overhead quick -k backend=compiled --json out.json
    .venv/bin/python -m tests.perf.bench_overhead --limit 10              # the first 10 cases only

Each case of the spec (for the CPU) goes through the worker's own `run_case` in this process, and
its result is built and stored into a fresh SQLite database the way the supervisor does it. Per
case the script prints the wall time, the sampled time (the sum of the timed samples: the kernel
time the run exists to measure) and the host time of each phase: prepare (inputs and callable),
first_call (the worker's timed first call: compilation lands here), check (the float64 check,
or 0 where a case of the same shape was checked already), timing_first_call (what the timing
engine does before its warmup: its set-up, graph capture in graph mode, and its own first call in
a worker older than `measure(first_call_ms=...)`), warmup,
sampling (the sampling phase's wall time: the sampled time plus what surrounds each sample),
store (building the record and writing it), and other
(the rest: skip checks, the clock monitor, freeing). Then the totals and the overhead fraction
(1 - sampled / wall). Worker start-up and the pipe to the supervisor are not included (they are
paid once per worker, not per case).

A worker without the phase split (an older one) still gives wall, sampled and store times; its
phases print as "-". `--json FILE` writes every row, for comparing two versions.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PHASES = ("prepare", "first_call", "check", "timing_first_call", "warmup", "sampling", "store", "other")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="quick", help="spec path or shipped name (default quick)")
    parser.add_argument("-k", "--filter", action="append", default=[], help="case filter, as `rooflab run -k`")
    parser.add_argument("--limit", type=int, default=0, help="only the first N cases (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the rows and totals as JSON")
    parser.add_argument("--quiet", action="store_true", help="totals only")
    return parser.parse_args()


def _sampled_ms(outcome: Any) -> float:
    """Sum of the timed samples: per-launch samples times the launches each sample held."""
    return float(sum(outcome.samples_ms)) * int(outcome.launches_per_sample or 1)


def main() -> int:
    args = _parse()
    from rooflab.db.store import ResultStore
    from rooflab.record import RunRecord
    from rooflab.runners.machine.environment import capture
    from rooflab.runners.orchestration.messages import CaseRequest
    from rooflab.runners.orchestration.records import build_record, op_work_model
    from rooflab.runners.orchestration.worker import run_case
    from rooflab.suite.ops.registry import all_ops
    from rooflab.suite.spec import apply_filters, expand, load_spec

    spec = load_spec(args.spec)
    cases = expand(spec, "cpu")
    if args.filter:
        cases = apply_filters(cases, args.filter)
    if args.limit:
        cases = cases[: args.limit]
    environment, device = capture("cpu")
    all_ops()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultStore(f"sqlite:///{Path(tmp) / 'bench.db'}")
        run_id = f"bench-overhead-{int(time.time())}"
        store.start_run(RunRecord(run_id=run_id, suite=spec.name, spec_text=spec.text, spec_hash=spec.sha256,
                                  started_at=datetime.now(UTC), host="bench", command_line="bench_overhead"))
        store.add_environment(run_id, environment)
        started = time.perf_counter()
        for case in cases:
            t0 = time.perf_counter()
            outcome = run_case(CaseRequest(case, seed=args.seed), device)
            t1 = time.perf_counter()
            record = build_record(case, outcome, run_id=run_id, device_fingerprint=environment.device_fingerprint,
                                  device_uuid=None, shard=None, work_model=op_work_model)
            store.add_measurement(record)
            t2 = time.perf_counter()
            phases = dict(getattr(outcome, "phases_ms", {}) or {})
            wall_ms = (t2 - t0) * 1e3
            row: dict[str, Any] = {
                "case": case.case_key, "status": outcome.status, "wall_ms": wall_ms,
                "sampled_ms": _sampled_ms(outcome) if outcome.status == "ok" else 0.0,
                "store_ms": (t2 - t1) * 1e3, "check_cached": bool(getattr(outcome, "check_cached", False)),
            }
            for name in PHASES[:-2]:
                row[f"{name}_ms"] = phases.get(name)
            row["other_ms"] = (wall_ms - row["store_ms"] - sum(phases.values())) if phases else None
            rows.append(row)
            if not args.quiet:
                _print_row(row)
        total_s = time.perf_counter() - started
        store.close()
    totals = _totals(rows, total_s)
    _print_totals(totals, len(rows))
    if args.json is not None:
        args.json.write_text(json.dumps({"spec": spec.name, "filters": args.filter, "rows": rows, "totals": totals},
                                        indent=1))
    return 0


def _fmt(value: float | None, width: int = 9) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.1f}"


def _print_row(row: dict[str, Any]) -> None:
    cells = " ".join(_fmt(row.get(f"{p}_ms")) for p in PHASES)
    print(f"{_fmt(row['wall_ms'])} {_fmt(row['sampled_ms'])} {cells}  {row['status']:<9} {row['case']}", flush=True)


def _totals(rows: list[dict[str, Any]], total_s: float) -> dict[str, Any]:
    wall = sum(r["wall_ms"] for r in rows)
    sampled = sum(r["sampled_ms"] for r in rows)
    split = {}
    for p in PHASES:
        values: list[Any] = [r.get(f"{p}_ms") for r in rows]
        split[p] = None if any(v is None for v in values) else float(sum(values))
    per_case = wall / len(rows) if rows else 0.0
    return {"cases": len(rows), "wall_ms": wall, "sampled_ms": sampled, "loop_s": total_s,
            "overhead_fraction": 1.0 - sampled / wall if wall else None,
            "overhead_per_case_ms": (wall - sampled) / len(rows) if rows else None,
            "wall_per_case_ms": per_case, "split_ms": split}


def _print_totals(totals: dict[str, Any], n: int) -> None:
    header = " ".join(f"{p[:9]:>9}" for p in PHASES)
    print(f"\n{'wall ms':>9} {'sampled':>9} {header}")
    split = totals["split_ms"]
    print(f"{_fmt(totals['wall_ms'])} {_fmt(totals['sampled_ms'])} " + " ".join(_fmt(split[p]) for p in PHASES))
    if totals["wall_ms"]:
        print(" " * 20 + " ".join(f"{'-':>9}" if split[p] is None else f"{100 * split[p] / totals['wall_ms']:8.1f}%"
                                  for p in PHASES))
    print(f"{n} cases: wall {totals['wall_ms'] / 1e3:.2f} s, sampled {totals['sampled_ms'] / 1e3:.2f} s, "
          f"overhead {100 * (totals['overhead_fraction'] or 0):.1f} % of wall, "
          f"{totals['overhead_per_case_ms'] or 0:.1f} ms per case")


if __name__ == "__main__":
    sys.exit(main())
