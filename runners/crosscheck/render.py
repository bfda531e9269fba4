"""The cross-check as Rich tables: one row per case and peer, then the summary per peer and family."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rooflab.runners.crosscheck.verdict import REASON_TEXT, Reason
from rooflab.vocab import ResultStatus


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f} %"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def render(report: dict[str, Any], console: Console) -> None:
    """Print `CrossCheckReport.to_dict()` output."""
    console.print(
        f"cross-check {escape(report['run_id'])}: {escape(report['suite'])} on {escape(report['device_name'])} "
        f"({report['device']}), {report['rounds']} rounds", highlight=False,
    )
    for name, peer in report["peers"].items():
        state = "runs" if peer["available"] else f"skipped: {peer['reason']}"
        console.print(f"  peer {name} {peer['version'] or ''}: {escape(state)}", highlight=False)
    timed = [c for c in report["checks"] if c["status"] == ResultStatus.OK]
    contended = [c for c in timed if c["contended"]]
    if contended:
        reasons = sorted({r for c in contended for r in c["contention_reasons"]})
        console.print(
            f"[bold yellow]{len(contended)} of {len(timed)} rows were timed on a contended machine[/] "
            f"({escape('; '.join(reasons))}): they are marked and left out of the geometric means", highlight=False,
        )
    table = Table(title="per case: ratio = rooflab as configured / peer (the method difference, named by the "
                        "modes that differ); in-mode ratio = rooflab in the peer's mode / peer (the engines' "
                        "agreement, on which `disagree` is judged)", show_lines=False)
    for column in ("case", "peer", "peer mode", "rooflab ms", "spread", "peer ms", "peer spread", "ratio",
                   "modes that differ", "in-mode ms", "in-mode ratio", "verdict"):
        table.add_column(column, justify="left" if column in _TEXT_COLUMNS else "right")
    for c in report["checks"]:
        if c["status"] != ResultStatus.OK:
            if c["status"] == ResultStatus.SKIPPED and not report["peers"].get(c["peer"], {}).get("available", True):
                continue  # said once above
            table.add_row(escape(c["case_key"]), c["peer"], "", "", "", "", "", "", "", "", "",
                          f"{c['status']}: {escape(c['error'] or '')}")
            continue
        table.add_row(
            escape(c["case_key"]), c["peer"], escape(c.get("peer_mode") or f"{c['peer_cache']}, {c['peer_clock']}"),
            _ms(c["rooflab_median_ms"]), _pct(c["rooflab_spread"]), _ms(c["peer_median_ms"]), _pct(c["peer_spread"]),
            _ratio(c["ratio"]), escape("; ".join(c.get("method_differences") or ()) or "none"),
            _ms(c.get("in_mode_median_ms")), _ratio(c.get("in_mode_ratio")), _verdict(c),
        )
    console.print(table)
    summary = Table(title="per peer and family (geometric means and worst cases leave contended rows out)")
    for column in ("peer", "family", "cases", "disagree", "on a contended machine", "ratio geomean", "worst ratio",
                   "in-mode ratio geomean", "in-mode worst", "in-mode worst case"):
        summary.add_column(column, justify="left" if column in ("peer", "family", "in-mode worst case") else "right")
    for s in report["summaries"]:
        summary.add_row(s["peer"], s["family"], str(s["cases"]), str(s["disagreements"]), str(s["contended"]),
                        _ratio(s["ratio_geomean"]), _ratio(s["worst_ratio"]), _ratio(s.get("in_mode_ratio_geomean")),
                        _ratio(s.get("in_mode_worst_ratio")), escape(s.get("in_mode_worst_case_key") or ""))
    console.print(summary)


_TEXT_COLUMNS = ("case", "peer", "peer mode", "modes that differ", "verdict")


def _verdict(c: dict[str, Any]) -> str:
    if not c["disagrees"]:
        return "agree (contended)" if c["contended"] else "agree"
    reason = c["likely_reason"]
    why = f" ({escape(REASON_TEXT[Reason(reason)])})" if reason else " (in the same mode: reason unknown)"
    return "[bold red]DISAGREE[/]" + why
