"""CLI: `rooflab breakdown --device NAME [--json]`: where each profiled block's time goes."""
from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from rooflab.reports.walls.breakdown import Breakdown, device_breakdowns, label
from rooflab.runners.cli.common import DbOption, JsonOption, db_url, fmt, pct
from rooflab.runners.cli.epilogue import console, respond


def breakdown_cmd(
    device: str = typer.Option(..., "--device", help="Device name (or part of it) or fingerprint prefix."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Each profiled transformer block of a device: its parts' time, FLOP/s, GB/s, wall and
    efficiency, the time no part accounts for, MFU, and the fusion estimate against the
    measured eager/compiled speedup."""
    respond(lambda: device_breakdowns(db_url(db), device), as_json=as_json, show=_show_blocks,
            to_json=lambda found: {"device": found[0], "blocks": [b.as_dict() for b in found[1]]})


def _show_blocks(found: tuple[str, list[Breakdown]]) -> None:
    name, items = found
    if not items:
        console.print(f"no profiled blocks for {escape(name)} (run a spec with op transformer_block, eager backend)")
        return
    for b in items:
        table = Table(title=f"{escape(name)}: {escape(label(b))}", title_justify="left")
        for col in ("part", "kind", "ms", "share", "TFLOP/s", "GB/s", "wall", "efficiency"):
            table.add_column(col, no_wrap=True)
        for p in b.parts:
            table.add_row(escape(p.name), p.kind, fmt(p.time_ms), pct(p.share), fmt(p.tflops), fmt(p.gbps),
                          p.wall or "", pct(p.efficiency))
        table.add_row("unaccounted", "gap + outside parts", fmt(b.unaccounted_ms), pct(b.unaccounted_ms / b.whole_ms),
                      "", "", "overhead", "")
        console.print(table)
        check = "ok" if b.sums_ok else "NOT within tolerance"
        lines = [
            f"profiled whole {fmt(b.whole_ms)} ms ({b.clock}), event-timed median {fmt(b.median_ms)} ms: "
            f"profiler overhead {pct(b.profiler_overhead)}; host wall of the profiled call {fmt(b.host_ms)} ms",
            f"parts + unattributed + gap against the whole: error {pct(b.sum_error)} (tolerance "
            f"{pct(b.as_dict()['sum_tolerance'])}): {check}; overlap {fmt(b.overlap_ms)} ms",
            f"MFU {pct(b.mfu_measured) or 'n/a'} of the measured matrix ceiling "
            f"({fmt(b.matrix_roof_tflops) + ' TFLOP/s' if b.matrix_roof_tflops else 'not measured'}), "
            f"{pct(b.mfu_datasheet) or 'n/a'} of the datasheet peak "
            f"({fmt(b.datasheet_tflops) + ' TFLOP/s' if b.datasheet_tflops else 'no datasheet entry'})",
        ]
        for c in b.chains:
            at = (f"{fmt(c.saved_ms)} ms at {fmt(b.bandwidth_roof_gbps)} GB/s" if b.bandwidth_roof_gbps
                  else "time n/a (no bandwidth roof)")
            lines.append(f"fusion chain {' + '.join(c.parts)}: "
                         f"{c.saved_bytes:,} of {c.unfused_bytes:,} bytes saved, {at}")
        estimate = f"{fmt(b.estimated_speedup)}x" if b.estimated_speedup else "n/a (no bandwidth roof)"
        measured = f"{fmt(b.compiled_speedup)}x" if b.compiled_speedup else "not measured"
        lines.append(f"fusion estimate: eager/fused speedup {estimate}; measured eager/compiled {measured}")
        for line in lines:
            console.print(line, highlight=False)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("breakdown")(breakdown_cmd)
