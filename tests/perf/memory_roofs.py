"""The three memory roofs of a device, run by run, with their median and spread (a script).

    .venv/bin/rooflab run roofline --device cpu -f benchmark=cpu_stream,cpu_fill -f dtype=float32 \\
        --db sqlite:///roofs.db          # as many times as runs are wanted
    .venv/bin/python -m tests.perf.memory_roofs --db sqlite:///roofs.db --device cpu [--admit-contended] \
        [--svg roofline.svg]

For each run: the ceilings reports.roofs.ceilings.compute_ceilings derives from that run's results
alone (hbm_rw from the cold copy, scale, add and triad; hbm_ro from the cold dot; hbm_wo from the
cold fill; each from arrays of at least 4x the last-level cache), with the probe result that set
each (its median and the CI half-width of that median). Then, per roof, the median of the runs'
ceilings and their spread (lowest to highest), and the ratio of the write-only and read-only roofs to
the read-write one within each run (a ratio measured in one run, so that the machine's load, which
moves all three, is divided out).

Only trustworthy results set a roof; on a machine whose load average stays above its cores, every
result is contended, and `--admit-contended` takes them as good so that the figures can be read
(they are then not ceilings rooflab's report would set, and the script says so). `--svg` writes the
report's roofline chart (reports.pages.plots.roofline_svg) of the newest run, with its roofs.
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import pandas as pd

from rooflab.reports.data.reads import load_device_results
from rooflab.reports.pages.plots import roofline_svg
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.vocab import HBM_CEILINGS, CeilingKind


def _run_roofs(rows: pd.DataFrame, name: str) -> dict[str, tuple[float, str, float, float]]:
    """{roof: (GB/s, case, its median ms, its CI half-width)} of one run's results."""
    dc = compute_ceilings(rows, name)
    out = {}
    for kind in HBM_CEILINGS:
        c = dc.get(kind)
        if c is None:
            continue
        r = rows[rows["case_key"] == c.case_key].iloc[0]
        out[str(kind)] = (c.value, c.case_key, float(r["median_ms"]), float(r["rel_ci_halfwidth"] or 0.0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--admit-contended", action="store_true",
                        help="take contended results as good (to read the figures on a loaded machine)")
    parser.add_argument("--svg", type=Path, help="write the roofline chart of the newest run here")
    args = parser.parse_args()
    name, rows = load_device_results(args.db, args.device)
    if args.admit_contended:
        print("NOTE: contended results are taken as good here: the roofs below are not ceilings rooflab would set")
        rows = rows.assign(quality="good")
    per_run: dict[str, dict[str, tuple[float, str, float, float]]] = {}
    for run_id, run_rows in rows.sort_values("run_order").groupby("run_id", sort=False):
        per_run[str(run_id)] = roofs = _run_roofs(run_rows, name)
        print(f"{run_id} ({run_rows['quality'].value_counts().to_dict()}):")
        for kind, (gbps, case, median_ms, ci) in roofs.items():
            print(f"  {kind:7s} {gbps:8.2f} GB/s  {case}  median {median_ms:.4g} ms +/-{100 * ci:.1f} %")
        rw = roofs.get(CeilingKind.HBM_RW)
        if rw:
            ratios = {k: v[0] / rw[0] for k, v in roofs.items() if k != CeilingKind.HBM_RW}
            print("  ratios to hbm_rw: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    print(f"{name}: over {len(per_run)} runs (median, lowest .. highest):")
    for kind in HBM_CEILINGS:
        values = [r[str(kind)][0] for r in per_run.values() if str(kind) in r]
        if values:
            print(f"  {kind:7s} {statistics.median(values):8.2f} GB/s  {min(values):.2f} .. {max(values):.2f}"
                  f"  ({len(values)} runs)")
    if args.svg is not None:
        newest = rows[rows["run_id"] == rows.sort_values("run_order")["run_id"].iloc[-1]]
        args.svg.write_text(roofline_svg(newest, compute_ceilings(newest, name)), encoding="utf-8")


if __name__ == "__main__":
    main()
