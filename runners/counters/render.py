"""`rooflab counters` as a Rich table: per case, the model against what the counters measured."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rooflab.db.counters import MODEL_TOLERANCE, READ_TOLERANCE, REASON_TEXT, WRITE_TOLERANCE
from rooflab.vocab import BytesReason, ResultStatus


def _mb(value: int | None) -> str:
    return "" if value is None else f"{value / 1e6:,.1f}"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _excess(value: int | None) -> str:
    return "" if value is None else f"{value / 1e6:+,.1f} MB"


def _side(measured: int | None, model: int | None) -> str:
    """`4.2 / 4.2`: counted MB against the model's (the model alone when the op has no split)."""
    if model is None:
        return ""
    return f"{_mb(measured) or '?'} / {_mb(model)}"


def _checks(r: dict[str, Any]) -> list[str]:
    """What the model check says of one ok reading: each side apart where it was judged."""
    check = []
    for side, measured, model in (("reads", "dram_read_bytes", "model_bytes_read"),
                                  ("writes", "dram_write_bytes", "model_bytes_written")):
        verdict = r[side]
        if verdict["differ"]:
            check.append(f"{side} {_excess(r[measured] - r[model])}: {verdict['reason']}")
    if r["bytes_differ"] and not r["reads"]["judged"]:
        check.append(f"DRAM {_excess(r['excess_bytes'])}: {r['reason']}")
    if r["write_back_bytes"] is not None:
        check.append(f"DRAM {_excess(r['excess_bytes'])}: output written back after the kernel (not a difference)")
    if r["reads"]["judged"] and not r["writes"]["judged"]:
        check.append("writes not judged (no write-back pass)")
    if r["flops_differ"]:
        check.append("FLOPs differ")
    if not r["flops_countable"]:
        pipe = f" ({r['tensor_instructions']:,} tensor-pipe instructions)" if r["tensor_instructions"] else ""
        check.append(f"FLOPs on the tensor cores: not countable by these counters{pipe}")
    if r["missing_metrics"]:
        check.append(f"missing: {', '.join(r['missing_metrics'])}")
    return check


def render(report: dict[str, Any], console: Console) -> None:
    """Print `CountersReport.to_dict()` output."""
    console.print(f"counters {escape(report['run_id'])}: {escape(report['suite'])} on {escape(report['device_name'])} "
                  f"({report['device']}), ncu {escape(report['ncu_version'])} ({escape(report['ncu'])})",
                  highlight=False, soft_wrap=True)
    table = Table(title="model against counters (DRAM MB read and written, counted / model; ratio = model / measured;"
                        " write-back: written back inside the profiled range, caught by a sweep)",
                  title_justify="left")
    for name in ("case", "status", "kernels", "kernel ms", "read MB", "written MB", "write-back MB", "bytes ratio",
                 "L2 MB", "FLOPs ratio", "model check"):
        table.add_column(name, justify="left" if name in ("case", "status", "model check") else "right",
                         overflow="fold")
    notes = []
    for r in report["readings"]:
        if r["status"] != ResultStatus.OK:
            table.add_row(escape(r["case_key"]), r["status"], "", "", _side(None, r["model_bytes_read"]),
                          _side(None, r["model_bytes_written"]), "", "", "", "", "")
            if r["status"] != ResultStatus.SKIPPED or r["error"]:
                notes.append(f"{r['case_key']}: {r['status']}: {r['error'] or ''}")
            continue
        kernel_ms = "" if r["kernel_ms"] is None else f"{r['kernel_ms']:.4g}"
        table.add_row(escape(r["case_key"]), r["status"], str(r["kernels"]), kernel_ms,
                      _side(r["dram_read_bytes"], r["model_bytes_read"]),
                      _side(r["dram_write_bytes"], r["model_bytes_written"]), _mb(r["caught_write_back_bytes"]),
                      _ratio(r["bytes_ratio"]), _mb(r["l2_traffic_bytes"]),
                      _ratio(r["flops_ratio"]) if r["flops_countable"] else "not countable",
                      escape("; ".join(_checks(r))))
    console.print(table)
    ok = [r for r in report["readings"] if r["status"] == ResultStatus.OK]
    differ = [r for r in ok if r["bytes_differ"]]
    console.print(f"{len(ok)} of {len(report['readings'])} cases counted; {len(differ)} read or write DRAM bytes "
                  f"away from their model (reads by more than {READ_TOLERANCE:.0%}, writes by more than "
                  f"{WRITE_TOLERANCE:.0%}; without the model's split, the total by more than {MODEL_TOLERANCE:.0%})",
                  highlight=False)
    sides = [r[side]["reason"] for r in differ for side in ("reads", "writes") if r[side]["reason"]]
    for reason in dict.fromkeys([*(r["reason_text"] for r in differ), *(REASON_TEXT[BytesReason(x)] for x in sides)]):
        console.print(f"  {escape(str(reason))}", highlight=False, soft_wrap=True)
    for note in dict.fromkeys(r["note_text"] for r in ok if r["note_text"]):
        console.print(f"  {escape(str(note))}", highlight=False, soft_wrap=True)
    for note in notes:
        console.print(escape(note), highlight=False, soft_wrap=True)
