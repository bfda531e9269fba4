"""CLI: `import`: rooflab's own exports, and the peers' output files (docs/peer-import.md).

Each path is a file or a folder (read recursively, files in name order). Each file is recognised by
its content (runners.peer_import.recognise), read and converted in full, then stored in one
transaction of its own (db.record_batch), so a malformed file writes nothing and the others are
still imported. A single rooflab export is imported exactly as before (db.importer). Everything a
file says (hosts, GPU, benchmark and axis names) is printed as plain text, never as Rich markup.
Exit code 2 when any file is refused, or when a path named on the command line stores nothing (a file
not recognised or holding no result, a folder none of whose files holds one), after every other file
is imported. `--dry-run` reads and checks everything and writes nothing.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from rooflab.db.importer import import_file, read_file
from rooflab.db.record_batch import RecordRun, load_runs
from rooflab.db.timeparse import parse_since
from rooflab.errors import UserError
from rooflab.runners.cli.common import DbOption, JsonOption, db_url
from rooflab.runners.cli.db_cmd import import_export
from rooflab.runners.cli.epilogue import console, err_console, fail, guarded, print_error, print_json
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.files import ImportOptions, file_time, largest_size_rates, read, source_of
from rooflab.runners.peer_import.format_table import format_names
from rooflab.runners.peer_import.nvbandwidth import HOST_NAME
from rooflab.runners.peer_import.recognise import recognise
from rooflab.runners.peer_import.results import TimeSource
from rooflab.vocab import ExitCode

SHOWN = 8  # left-out rows and notes listed per file (--json lists all)


class Outcome(StrEnum):
    """What became of one file."""

    STORED = "stored"  # its results are in the database (added, or already present)
    READ = "read"  # --dry-run: read and checked whole, nothing written
    NO_RESULT = "no result"  # recognised, but nothing in it became a result (the reasons are listed)
    NOT_RECOGNISED = "not recognised"  # no format rooflab reads
    FAILED = "failed"  # malformed: refused with its line, nothing of it written


@dataclass
class FileReport:
    """What became of one file."""

    path: Path
    format: str | None = None
    tool: str | None = None
    outcome: Outcome = Outcome.NOT_RECOGNISED
    why: str = ""
    results: int = 0
    added: int = 0
    present: int = 0
    left_out: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    largest: list[dict[str, Any]] = field(default_factory=list)  # each series' largest size: its rates

    def as_dict(self) -> dict[str, Any]:
        return {"file": str(self.path), "format": self.format, "tool": self.tool, "outcome": self.outcome,
                "why": self.why, "results": self.results, "added": self.added, "already_present": self.present,
                "left_out": self.left_out, "notes": self.notes, "runs": self.runs, "largest_sizes": self.largest}


def _files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        else:
            yield path


def _measured_at(text: str | None) -> Any:
    return guarded(lambda: parse_since(text, option="--measured-at")) if text else None


def _run_summary(run: Any, when: Any) -> dict[str, Any]:
    envs = run.environments
    times = {m.identity.measured_at for m in run.measurements}
    source = when.source if times == {when.at} else TimeSource.FILE
    first = envs[0] if envs else None
    return {"run_id": run.run.run_id, "device": first.device_name if first else None,
            "device_fingerprint": first.device_fingerprint if first else None,
            "hosts": list(first.info.get("hosts", [])) if first else [],
            "nodes": first.info.get("nodes") if first else None,
            "ranks_named": first.info.get("ranks_named") if first else None,
            "tool_version": first.info.get("tool_version") if first else None,
            "library_version": first.info.get("library_version") if first else None,
            "cases": len({m.identity.case.case_key for m in run.measurements}),
            "ranks": sorted({m.ranks for m in run.measurements if m.ranks is not None}),
            "measured_at": min(times).isoformat() if times else None, "time_source": str(source),
            "results": len(run.measurements)}


def _store(url: str, conversion: Any) -> Any:
    return load_runs(url, [RecordRun(run=r.run, environments=r.environments, measurements=r.measurements)
                           for r in conversion.runs])


def _peer_file(url: str, path: Path, recognised: Any, options: Any, report: FileReport, dry_run: bool) -> None:
    conversion = read(recognised.format, recognised.text, source_of(path, options))
    report.tool = str(conversion.tool)
    report.left_out, report.notes = conversion.left_out, conversion.notes
    if not conversion.runs:
        report.outcome = Outcome.NO_RESULT
        report.why = "; ".join(conversion.left_out[:3]) or "the file holds no result (no table row, no timed state)"
        return
    when = file_time(path, options)
    report.runs = [_run_summary(r, when) for r in conversion.runs]
    report.largest = [dataclasses.asdict(x) for r in conversion.runs for x in largest_size_rates(r)]
    report.results = conversion.results
    if dry_run:
        report.outcome = Outcome.READ
        return
    counts = _store(url, conversion)
    report.outcome = Outcome.STORED
    report.added, report.present = counts.measurements, counts.skipped


def _export_file(url: str, path: Path, report: FileReport, dry_run: bool) -> None:
    report.tool = "rooflab"
    if dry_run:
        report.outcome, report.results = Outcome.READ, len(read_file(path))
        return
    result = import_file(url, path)
    report.outcome, report.results = Outcome.STORED, result.rows
    report.added, report.present = result.counts.measurements, result.counts.skipped


def import_one(url: str, path: Path, options: Any, dry_run: bool = False) -> FileReport:
    """Recognise, read, convert and store one file; its report (a malformed file: outcome failed)."""
    report = FileReport(path=path)
    recognised = recognise(path)
    if recognised.name is None:
        report.why = recognised.why
        return report
    report.format = recognised.name
    try:
        if recognised.export:
            _export_file(url, path, report, dry_run)
        else:
            _peer_file(url, path, recognised, options, report, dry_run)
    except PeerFormatError as exc:
        report.outcome, report.why = Outcome.FAILED, exc.located(path)
    except UserError as exc:
        report.outcome, report.why = Outcome.FAILED, f"{path}: {exc}"
    return report


def _plain(out: Console, text: str) -> None:
    """Text that holds what a file said: printed as it is, never read as Rich markup."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def _where(run: dict[str, Any]) -> str:
    """Where a run ran, as far as its file says: its nodes and hosts, or the hosts its device lines name."""
    hosts = ", ".join(run["hosts"])
    if run["nodes"]:
        return f" on {run['nodes']} node(s) ({hosts})"
    if run["hosts"]:
        named = f"name {run['ranks_named']} of its ranks" if run.get("ranks_named") else "name some of its ranks"
        return f", nodes unknown (its device lines {named}, on {hosts})"
    return ""


def _print_report(report: FileReport) -> None:
    head = f"{report.path}: {report.format or 'not recognised'}"
    if report.outcome in (Outcome.STORED, Outcome.READ):
        counts = (f"({report.added} added, {report.present} already present)" if report.outcome == Outcome.STORED
                  else "(--dry-run: nothing written)")
        _plain(console, f"{head}: {report.results} results {counts}")
        for run in report.runs:
            ranks = f", {'/'.join(map(str, run['ranks']))} ranks" if run["ranks"] else ""
            _plain(console, f"  run {run['run_id']}: {run['device']}{ranks}{_where(run)}; {run['cases']} cases; "
                            f"measured at {run['measured_at']} ({_time_words(run['time_source'])})")
        for largest in report.largest if report.outcome == Outcome.READ else ():
            printed = "; ".join(f"{p['what']} printed {p['printed_gbps']:.6g}, rooflab {p['rooflab_gbps']:.6g}"
                                for p in largest["printed"] if p["rooflab_gbps"] is not None)
            stored = f"{largest['stored_gbps']:.6g} GB/s" if largest["stored_gbps"] is not None else largest["status"]
            _plain(console, f"  largest size: {largest['case_key']}: {stored}" + (f" ({printed})" if printed else ""))
    elif report.outcome == Outcome.NO_RESULT:
        _plain(console, f"{head}: holds no result: {report.why}")
    elif report.outcome == Outcome.NOT_RECOGNISED:
        _plain(console, f"{head}: {report.why}")
    for label, items in (("left out", report.left_out), ("note", report.notes)):
        items = [i for i in items if i not in report.why]  # a file with no result said its reasons already
        for item in items[:SHOWN]:
            _plain(console, f"  {label}: {item}")
        if len(items) > SHOWN:
            _plain(console, f"  ... and {len(items) - SHOWN} more {label} (--json lists them)")


def _time_words(source: str) -> str:
    return {TimeSource.FILE: "the file's own time", TimeSource.OPTION: "--measured-at",
            TimeSource.MODIFIED: "the file's modification time: it gives no time of its own; give --measured-at"
            }.get(TimeSource(source), source)


def _summary(reports: list[FileReport]) -> dict[str, int]:
    return {"files": len(reports), "stored": sum(r.outcome in (Outcome.STORED, Outcome.READ) for r in reports),
            "results": sum(r.results for r in reports), "added": sum(r.added for r in reports),
            "already_present": sum(r.present for r in reports),
            "no_result": sum(r.outcome == Outcome.NO_RESULT for r in reports),
            "not_recognised": sum(r.outcome == Outcome.NOT_RECOGNISED for r in reports),
            "failed": sum(r.outcome == Outcome.FAILED for r in reports)}


def _run_all(url: str, files: list[Path], options: Any, dry_run: bool) -> list[FileReport]:
    reports: list[FileReport] = []
    with Progress(console=err_console, transient=True, disable=len(files) < 2 or not err_console.is_terminal) as bar:
        task = bar.add_task("importing", total=len(files))
        for path in files:
            bar.update(task, description=_escaped(f"importing {path.name}"[:60]))
            reports.append(import_one(url, path, options, dry_run))
            bar.advance(task)
    return reports


def _legacy_export(paths: list[Path]) -> bool:
    """One file given, a rooflab export: imported and reported exactly as before."""
    if len(paths) != 1 or not paths[0].is_file():
        return False

    return recognise(paths[0]).export


def import_cmd(
    paths: list[Path] = typer.Argument(..., help="Files or folders: rooflab exports (.csv, .jsonl, .parquet, "
                                       f"optionally .gz) and the peers' formats ({format_names()}); each file "
                                       "recognised by its content."),
    measured_at: str | None = typer.Option(None, "--measured-at", help="When the results were measured, for files "
                                           "that give no time of their own (ISO time; without a zone: UTC). "
                                           "Default: the file's modification time."),
    device_name: str | None = typer.Option(None, "--device-name", help="The GPU, for files that name none "
                                           "(BabelStream output without device lines, rccl-tests' JSON and CSV)."),
    ranks: int | None = typer.Option(None, "--ranks", min=2, help="The world size, for rccl-tests' JSON and CSV "
                                     "written without their `gpus` field (MPI builds)."),
    buffer_mib: int | None = typer.Option(None, "--buffer-mib", min=1, help="nvbandwidth's buffer size (its -b, "
                                          "in MiB), which its output does not print."),
    host: str | None = typer.Option(None, "--host", help="The node the file was measured on, for outputs that name "
                                    "none (nvbandwidth before v0.8): its GPUs' keys are HOST/PCI id."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Read and check every file and say what would be stored "
                                 "(runs, devices, cases, each series' largest size with its rate beside the printed "
                                 "one); write nothing."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Import results: a rooflab export, or the peers' own output files (importing twice adds nothing)."""
    missing = [p for p in paths if not p.exists()]
    if missing:
        fail(f"no such file or folder: {_escaped(str(missing[0]))}")
    if host is not None and not HOST_NAME.match(host):
        fail(f"--host {_escaped(host)!r}: a host name (letters, digits, '.', '_' and '-', starting with a letter or "
             "digit)")
    url = db_url(db)
    if _legacy_export(paths) and not dry_run:
        import_export(paths[0], url, as_json)
        return
    options = ImportOptions(measured_at=_measured_at(measured_at), device_name=device_name, ranks=ranks,
                            buffer_bytes=buffer_mib * (1 << 20) if buffer_mib is not None else None, host=host)
    files = list(_files(paths))
    reports = _run_all(url, files, options, dry_run)
    _finish(reports, paths, as_json)


def _escaped(text: str) -> str:
    return escape(text)


def _finish(reports: list[FileReport], paths: list[Path], as_json: bool) -> None:
    summary = _summary(reports)
    if as_json:
        print_json({"files": [r.as_dict() for r in reports], "summary": summary})
    else:
        for report in reports:
            if report.outcome != Outcome.FAILED:
                _print_report(report)
        done = (f"{summary['stored']} read whole ({summary['results']} results; --dry-run: nothing written)"
                if any(r.outcome == Outcome.READ for r in reports) else
                f"{summary['stored']} imported ({summary['added']} results added, {summary['already_present']} "
                "already present)")
        _plain(console, f"{summary['files']} files read: {done}, {summary['no_result']} with no result, "
                        f"{summary['not_recognised']} not recognised, {summary['failed']} failed")
    for report in reports:
        if report.outcome == Outcome.FAILED:
            print_error(_escaped(report.why) + " (nothing of this file was written)")
    unstored = _named_storing_nothing(reports, paths)
    for message in unstored:
        print_error(_escaped(message))
    if summary["failed"] or unstored:
        raise typer.Exit(ExitCode.BAD_INPUT)


def _named_storing_nothing(reports: list[FileReport], paths: list[Path]) -> list[str]:
    """Why each path named on the command line stored nothing: a file not recognised or holding no result
    (with the flag that would help), a folder none of whose files holds a result. A file found in a folder
    may be anything else (a results folder holds logs and notes too): it is only listed."""
    kept = (Outcome.STORED, Outcome.READ, Outcome.FAILED)  # a refused file has said why already
    out = []
    for path in paths:
        if path.is_dir():
            inside = [r for r in reports if r.path.is_relative_to(path)]
            if not any(r.outcome in kept for r in inside):
                out.append(f"{path}: none of its {len(inside)} files holds a result rooflab reads (each is "
                           "listed above with why)")
            continue
        report = next((r for r in reports if r.path == path), None)
        if report is None or report.outcome in kept:
            continue
        what = "not recognised" if report.outcome == Outcome.NOT_RECOGNISED else "holds no result"
        out.append(f"{path}: {what}: {report.why}")
    return out


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("import")(import_cmd)
