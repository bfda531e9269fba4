"""The elementary-function roofs of a device and the diagnosis of the ops that use them (a script).

    .venv/bin/rooflab run roofline --device cpu -f benchmark=cpu_stream,cpu_elementary,cpu_launch \\
        -f dtype=float32 -f n=16777216,1048576,1 --db sqlite:///elem.db
    .venv/bin/rooflab run quick --device cpu -f op=cos_cos,gelu,softmax --db sqlite:///elem.db
    .venv/bin/python -m tests.perf.elementary_roof --db sqlite:///elem.db --device cpu [--admit-contended]

Prints each `elementary` probe result (function, k, rate in Geval/s, the CI half-width of its median,
its quality), then the diagnosis (reports.walls.diagnosis.diagnose) of the newest run that holds cases
other than probes, against the ceilings (reports.roofs.ceilings.compute_ceilings) of every result of the
device in the database (unlike the report, which takes its roofs from one run: here the streams,
the probe and the ops may come from separate runs): per case the memory, compute and
elementary-function times, the roofline time, the wall and its roof, and the efficiency.

Only trustworthy results set a roof. On a machine where every result is contended (a shared
2-core machine whose load average stays above 2), there would be no roof at all; `--admit-contended`
then takes the contended results as if they were good, so that the arithmetic can be shown. Figures
read that way are not ceilings, and the script says so above the table.

Last run here (2026-11-24, 2-core Intel Xeon, torch 2.13.0+cpu, load average 3.5-6.5: every result
contended, so with --admit-contended): see docs/counters.md, "Measured on this CPU".
"""
from __future__ import annotations

import argparse

import pandas as pd

from rooflab.reports.data.frames import usable
from rooflab.reports.data.reads import load_device_results
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.roofs.elementary import probe_rates
from rooflab.reports.walls.diagnosis import diagnose


def _fmt(value: object, digits: int = 4) -> str:
    try:
        f = float(value)  # type: ignore[arg-type]  # any cell of a frame
    except (TypeError, ValueError):
        return str(value)
    return "-" if f != f else f"{f:.{digits}g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--admit-contended", action="store_true",
                        help="take contended results as good (to show the arithmetic on a loaded machine)")
    args = parser.parse_args()
    name, rows = load_device_results(args.db, args.device)
    if args.admit_contended:
        print("NOTE: contended results are taken as good here: the roofs below are not ceilings rooflab would set")
        rows = rows.assign(quality="good")
    ops = rows[~rows["family"].isin(["probe", "overhead"])]
    newest = ops.sort_values("run_order")["run_id"].iloc[-1]
    shown = rows[rows["run_id"] == newest]
    dc = compute_ceilings(rows, name)
    probe = usable(rows[rows["op"] == "elementary"])
    rates = probe_rates(probe)
    print(f"{name}: elementary probe")
    for _, r in rates.iterrows():
        row = probe.loc[r["index"]]
        print(f"  {r['fn']:4s} {row['case_key'].split(':')[-1]:24s} {_fmt(r['gevals'])} Geval/s  "
              f"median {_fmt(row['median_ms'])} ms  CI95 +/-{_fmt(100 * row['rel_ci_halfwidth'], 3)} %  "
              f"{row['quality']}")
    print("ceilings:", "; ".join(f"{c.label} {_fmt(c.value)} {c.unit}" for c in dc.ceilings))
    print(f"diagnosis of run {newest}:")
    diag = diagnose(shown, dc)
    cols = ["case_key", "median_ms", "memory_ms", "compute_ms", "elementary_ms", "roofline_ms", "wall", "wall_roof",
            "efficiency"]
    with pd.option_context("display.width", 250, "display.max_colwidth", 60):
        print(diag[cols].to_string(index=False, float_format=lambda v: _fmt(v)))


if __name__ == "__main__":
    main()
