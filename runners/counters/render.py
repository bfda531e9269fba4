"""`rooflab counters` as a Rich table: per case, the model against what the counters measured."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rooflab.vocab import ResultStatus


def _mb(value: int | None) -> str:
    return "" if value is None else f"{value / 1e6:,.1f}"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _excess(value: int | None) -> str:
    return "" if value is None else f"{value / 1e6:+,.1f} MB"


def render(report: dict[str, Any], console: Console) -> None:
    """Print `CountersReport.to_dict()` output."""
    console.print(f"counters {escape(report['run_id'])}: {escape(report['suite'])} on {escape(report['device_name'])} "
                  f"({report['device']}), ncu {escape(report['ncu_version'])} ({escape(report['ncu'])})",
                  highlight=False, soft_wrap=True)
    table = Table(title="model against counters (bytes: DRAM read + written; ratio = model / measured)",
                  title_justify="left")
    for name in ("case", "status", "kernels", "kernel ms", "DRAM MB", "model MB", "bytes ratio", "L2 MB",
                 "FLOPs ratio", "model check"):
        table.add_column(name, justify="left" if name in ("case", "status", "model check") else "right",
                         overflow="fold")
    notes = []
    for r in report["readings"]:
        if r["status"] != ResultStatus.OK:
            table.add_row(escape(r["case_key"]), r["status"], "", "", "", _mb(r["model_bytes"]), "", "", "", "")
            if r["status"] != ResultStatus.SKIPPED or r["error"]:
                notes.append(f"{r['case_key']}: {r['status']}: {r['error'] or ''}")
            continue
        check = []
        if r["bytes_differ"]:
            check.append(f"DRAM {_excess(r['excess_bytes'])}: {r['reason']}")
        if r["write_back_bytes"] is not None:
            check.append(f"DRAM {_excess(r['excess_bytes'])}: output written back after the kernel (not a difference)")
        if r["flops_differ"]:
            check.append("FLOPs differ")
        if not r["flops_countable"]:
            check.append("FLOPs on the tensor cores: not countable by these counters"
                         + (f" ({r['tensor_instructions']:,} tensor-pipe instructions)"
                            if r["tensor_instructions"] else ""))
        if r["missing_metrics"]:
            check.append(f"missing: {', '.join(r['missing_metrics'])}")
        kernel_ms = "" if r["kernel_ms"] is None else f"{r['kernel_ms']:.4g}"
        table.add_row(escape(r["case_key"]), r["status"], str(r["kernels"]), kernel_ms, _mb(r["dram_bytes"]),
                      _mb(r["model_bytes"]), _ratio(r["bytes_ratio"]), _mb(r["l2_traffic_bytes"]),
                      _ratio(r["flops_ratio"]) if r["flops_countable"] else "not countable",
                      escape("; ".join(check)))
    console.print(table)
    ok = [r for r in report["readings"] if r["status"] == ResultStatus.OK]
    differ = [r for r in ok if r["bytes_differ"]]
    console.print(f"{len(ok)} of {len(report['readings'])} cases counted; {len(differ)} move DRAM bytes more than "
                  "10 % away from their model", highlight=False)
    for reason in dict.fromkeys(r["reason_text"] for r in differ):
        console.print(f"  {escape(str(reason))}", highlight=False, soft_wrap=True)
    for note in dict.fromkeys(r["note_text"] for r in ok if r["note_text"]):
        console.print(f"  {escape(str(note))}", highlight=False, soft_wrap=True)
    for note in notes:
        console.print(escape(note), highlight=False, soft_wrap=True)
