"""What a run shows while it goes and at its end.

Three reporters with one interface (the supervisor's `Progress`): a Rich progress bar with a line
per case above it on a terminal, plain log lines (one per case) when the output is not a terminal,
and a quiet one that shows only problems. `render_summary` prints the table at the end.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from rooflab.db.measurement_columns import gbps_of, tflops_of
from rooflab.record import MeasurementRecord
from rooflab.runners.orchestration.run_summary import SummaryDict
from rooflab.suite.case import Case
from rooflab.vocab import Quality, ResultStatus

STATUS_STYLES = {
    ResultStatus.OK: "green",
    ResultStatus.INCORRECT: "magenta",
    ResultStatus.FAILED: "red",
    ResultStatus.CRASHED: "bold red",
    ResultStatus.SKIPPED: "yellow",
}


def format_ms(value: float | None) -> str:
    """A duration given in ms, in the unit that reads best: `1.235 s`, `152.8 ms`, `2.94 us`, `812 ns`."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1e3:.3f} s"
    if value >= 1:
        return f"{value:.4g} ms"
    if value >= 1e-3:
        return f"{value * 1e3:.4g} us"
    return f"{value * 1e6:.4g} ns"


def describe_result(record: MeasurementRecord) -> str:
    """`median 1.234 ms ±0.4% [p10 1.230 ms, p90 1.240 ms]  812.3 GB/s  0.21 TFLOP/s` or the error."""
    stats = record.stats
    if record.status != ResultStatus.OK or stats is None:
        return record.error or ""
    parts = [f"median {format_ms(stats.median_ms)}"]
    if stats.rel_ci_halfwidth is not None:
        parts[0] += f" ±{stats.rel_ci_halfwidth * 100:.1f}%"
    parts.append(f"[p10 {format_ms(stats.p10_ms)}, p90 {format_ms(stats.p90_ms)}, n={stats.n_samples}]")
    gbps, tflops = gbps_of(record), tflops_of(record)
    if record.work.bytes and gbps is not None:
        parts.append(f"{gbps:.1f} GB/s" if gbps >= 1 else f"{gbps:.3g} GB/s")
    if record.work.flops and tflops is not None:
        parts.append(f"{tflops:.3g} TFLOP/s")
    machine = record.machine
    if machine.throttled:
        parts.append("THROTTLED")
    elif "sw_power_cap" in machine.throttle_reasons:
        parts.append("at power cap")
    if machine.power_w is not None:
        parts.append(f"{machine.power_w:.0f} W")
    if machine.quality and machine.quality != Quality.GOOD:
        parts.append(f"{machine.quality.upper()}: {'; '.join(machine.quality_reasons)}")
    return "  ".join(parts)


class _Base:
    def __init__(self) -> None:
        self.total = 0
        self.done = 0
        self.multi_device = False

    def start(self, total: int, devices: Sequence[str]) -> None:
        self.total = total
        self.multi_device = len(devices) > 1

    def lane_ready(self, lane: str, device_name: str, pending: int, already_measured: int) -> None:
        self.total -= already_measured
        if already_measured:
            self.note(f"{lane}: {already_measured} case(s) already measured in this run; {pending} to go")

    def cases_dropped(self, lane: str, dropped: int, pending: int) -> None:
        """Cases another process stored meanwhile (the same shard running twice): not measured here."""
        self.total -= dropped
        self.note(f"{lane}: {dropped} case(s) were stored meanwhile by another process; {pending} to go")

    def cases_added(self, lane: str, added: int) -> None:
        """Results beyond one for a case just measured (a matrix of the link matrix: one per pair)."""
        self.total += added

    def case_started(self, lane: str, case: Case) -> None:
        return None

    def case_done(self, lane: str, case: Case, record: MeasurementRecord, elapsed_s: float) -> None:
        self.done += 1

    def note(self, text: str) -> None:
        return None

    def close(self) -> None:
        return None

    def _line(self, lane: str, case: Case, record: MeasurementRecord) -> str:
        width = len(str(max(self.total, 1)))
        where = f"{lane} " if self.multi_device else ""
        return (f"[{self.done:>{width}}/{self.total}] {where}{record.status:<9} {case.describe()}  "
                f"{describe_result(record)}")


class LogProgress(_Base):
    """One plain line per case (for logs, pipes and CI)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream = stream or sys.stdout

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def lane_ready(self, lane: str, device_name: str, pending: int, already_measured: int) -> None:
        super().lane_ready(lane, device_name, pending, already_measured)
        self._write(f"{lane}: {device_name}, {pending} case(s)")

    def case_done(self, lane: str, case: Case, record: MeasurementRecord, elapsed_s: float) -> None:
        super().case_done(lane, case, record, elapsed_s)
        self._write(self._line(lane, case, record))

    def note(self, text: str) -> None:
        self._write(text)


class QuietProgress(_Base):
    """Nothing but problems (worker deaths, devices given up, interrupts), on stderr."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream = stream or sys.stderr

    def lane_ready(self, lane: str, device_name: str, pending: int, already_measured: int) -> None:
        self.total -= already_measured

    def note(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


class RichProgress(_Base):
    """A progress bar (done/total, current case, ETA) with each case's line printed above it."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self.task: Any = None
        self.current: dict[str, str] = {}

    def start(self, total: int, devices: Sequence[str]) -> None:
        super().start(total, devices)
        self.task = self.bar.add_task("starting workers", total=total)
        self.bar.start()

    def _describe_current(self) -> str:
        if not self.current:
            return ""
        if not self.multi_device:
            return next(iter(self.current.values()))
        return " | ".join(f"{lane}: {text}" for lane, text in self.current.items())

    def lane_ready(self, lane: str, device_name: str, pending: int, already_measured: int) -> None:
        super().lane_ready(lane, device_name, pending, already_measured)
        self.bar.update(self.task, total=self.total)
        self.console.print(f"{escape(lane)}: {escape(device_name)}, {pending} case(s)", highlight=False)

    def cases_dropped(self, lane: str, dropped: int, pending: int) -> None:
        super().cases_dropped(lane, dropped, pending)
        self.bar.update(self.task, total=self.total)

    def cases_added(self, lane: str, added: int) -> None:
        super().cases_added(lane, added)
        self.bar.update(self.task, total=self.total)

    def case_started(self, lane: str, case: Case) -> None:
        self.current[lane] = case.describe()
        self.bar.update(self.task, description=self._describe_current())

    def case_done(self, lane: str, case: Case, record: MeasurementRecord, elapsed_s: float) -> None:
        super().case_done(lane, case, record, elapsed_s)
        self.current.pop(lane, None)
        style = STATUS_STYLES.get(ResultStatus(record.status), "")
        line = escape(self._line(lane, case, record))
        self.console.print(f"[{style}]{line}[/]" if style else line, highlight=False)
        self.bar.update(self.task, completed=self.done, description=self._describe_current())

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]{escape(text)}[/]", highlight=False)

    def close(self) -> None:
        self.bar.stop()


def make_progress(*, quiet: bool, json_output: bool, console: Console | None = None) -> _Base:
    """Rich bar on a terminal, plain lines otherwise, quiet on request; --json keeps stdout for JSON."""
    if quiet:
        return QuietProgress()
    out = console or Console(stderr=json_output)
    if out.is_terminal:
        return RichProgress(out)
    return LogProgress(sys.stderr if json_output else sys.stdout)


def render_summary(summary: SummaryDict, console: Console) -> None:
    """The end-of-run table: counts by status, the slowest cases, where the results are."""
    console.print(f"run {escape(summary['run_id'])}: [bold]{escape(summary['status'])}[/]", highlight=False)
    counts = Table()
    counts.add_column("status")
    counts.add_column("cases", justify="right")
    for status, n in summary["counts"].items():
        style = STATUS_STYLES.get(ResultStatus(status), "")
        counts.add_row(f"[{style}]{status}[/]" if style else status, str(n))
    counts.add_row("total", str(sum(summary["counts"].values())), style="bold")
    console.print(counts)
    slowest = summary.get("slowest") or []
    if slowest:
        table = Table(title="slowest cases (by median)", title_justify="left")
        table.add_column("case", overflow="fold")
        table.add_column("device")
        for column in ("median", "GB/s", "TFLOP/s"):
            table.add_column(column, justify="right")
        for row in slowest:
            gbps = f"{row['gbps']:.1f}" if row.get("gbps") is not None else "-"
            tflops = f"{row['tflops']:.3g}" if row.get("tflops") is not None else "-"
            table.add_row(escape(row["case_key"]), escape(row["device"]), format_ms(row["median_ms"]), gbps, tflops)
        console.print(table)
    lines = [f"results: {summary['db_url']}   run id: {summary['run_id']}"]
    if summary.get("shard"):
        lines[0] += f"   shard: {summary['shard']}"
    if summary.get("already_measured"):
        lines.append(f"{summary['already_measured']} case(s) were already measured in this run and were not repeated")
    if summary.get("unmeasured"):
        lines.append(
            f"{summary['unmeasured']} case(s) not measured; continue with: "
            f"rooflab run --resume {summary['run_id']} --db {summary['db_url']}"
            + (f" --shard {summary['shard']}" if summary.get("shard") else "")
        )
    for device in summary.get("devices", []):
        if device.get("error"):
            lines.append(f"device {device['torch_device']}: {device['error']}")
    lines.append(f"elapsed: {summary['elapsed_s']:.1f} s")
    for line in lines:
        console.print(escape(line), highlight=False, soft_wrap=True)


