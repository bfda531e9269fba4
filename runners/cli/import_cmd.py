"""CLI: `import`: rooflab's own exports, and the peers' output files (docs/peer-import.md).

Each path is a file or a folder (read recursively, files in name order). Each file is recognised by
its content (runners.peer_import.recognise), read and converted in full, then stored in one
transaction of its own (db.record_batch), so a malformed file writes nothing and the others are
still imported. A single rooflab export is imported exactly as before (db.importer). Everything a
file says (hosts, GPU, benchmark and axis names) is printed as plain text, never as Rich markup.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from rooflab.runners.cli.common import DbOption, JsonOption, db_url
from rooflab.runners.cli.epilogue import console, err_console, fail, guarded, print_error, print_json
from rooflab.vocab import ExitCode

SHOWN = 8  # left-out rows and disagreements listed per file (--json lists all)


class Outcome(StrEnum):
    """What became of one file."""

    STORED = "stored"  # its results are in the database (added, or already present)
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
    disagreements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"file": str(self.path), "format": self.format, "tool": self.tool, "outcome": self.outcome,
                "why": self.why, "results": self.results, "added": self.added, "already_present": self.present,
                "left_out": self.left_out, "disagreements": self.disagreements, "notes": self.notes,
                "runs": self.runs}


def _files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        else:
            yield path


def _measured_at(text: str | None) -> Any:
    from rooflab.db.timeparse import parse_since

    return guarded(lambda: parse_since(text, option="--measured-at")) if text else None


def _run_summary(run: Any, when: Any) -> dict[str, Any]:
    from rooflab.runners.peer_import.results import TimeSource

    envs = run.environments
    times = {m.identity.measured_at for m in run.measurements}
    source = when.source if times == {when.at} else TimeSource.FILE
    first = envs[0] if envs else None
    return {"run_id": run.run.run_id, "device": first.device_name if first else None,
            "device_fingerprint": first.device_fingerprint if first else None,
            "hosts": list(first.info.get("hosts", [])) if first else [],
            "nodes": first.info.get("nodes") if first else None,
            "ranks": sorted({m.ranks for m in run.measurements if m.ranks is not None}),
            "measured_at": min(times).isoformat() if times else None, "time_source": str(source),
            "results": len(run.measurements)}


def _store(url: str, conversion: Any) -> Any:
    from rooflab.db.record_batch import RecordRun, load_runs

    return load_runs(url, [RecordRun(run=r.run, environments=r.environments, measurements=r.measurements)
                           for r in conversion.runs])


def _peer_file(url: str, path: Path, recognised: Any, options: Any, report: FileReport) -> None:
    from rooflab.runners.peer_import.files import convert, file_time

    conversion = convert(path, recognised, options)
    report.tool = str(conversion.tool)
    report.left_out, report.disagreements = conversion.left_out, conversion.disagreements
    report.notes = conversion.notes
    if not conversion.runs:
        report.outcome = Outcome.NO_RESULT
        report.why = "; ".join(conversion.left_out[:3]) or "the file holds no result (no table row, no timed state)"
        return
    counts = _store(url, conversion)
    when = file_time(path, options)
    report.runs = [_run_summary(r, when) for r in conversion.runs]
    report.outcome, report.results = Outcome.STORED, conversion.results
    report.added, report.present = counts.measurements, counts.skipped


def _export_file(url: str, path: Path, report: FileReport) -> None:
    from rooflab.db.importer import import_file

    result = import_file(url, path)
    report.tool, report.outcome, report.results = "rooflab", Outcome.STORED, result.rows
    report.added, report.present = result.counts.measurements, result.counts.skipped


def import_one(url: str, path: Path, options: Any) -> FileReport:
    """Recognise, read, convert and store one file; its report (a malformed file: outcome failed)."""
    from rooflab.errors import UserError
    from rooflab.runners.peer_import.errors import PeerFormatError
    from rooflab.runners.peer_import.recognise import PeerFormat, recognise

    report = FileReport(path=path)
    recognised = recognise(path)
    if recognised.format is None:
        report.why = recognised.why
        return report
    report.format = str(recognised.format)
    try:
        if recognised.format == PeerFormat.ROOFLAB_EXPORT:
            _export_file(url, path, report)
        else:
            _peer_file(url, path, recognised, options, report)
    except PeerFormatError as exc:
        report.outcome, report.why = Outcome.FAILED, exc.located(path)
    except UserError as exc:
        report.outcome, report.why = Outcome.FAILED, f"{path}: {exc}"
    return report


def _plain(out: Console, text: str) -> None:
    """Text that holds what a file said: printed as it is, never read as Rich markup."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def _print_report(report: FileReport) -> None:
    head = f"{report.path}: {report.format or 'not recognised'}"
    if report.outcome == Outcome.STORED:
        _plain(console, f"{head}: {report.results} results ({report.added} added, {report.present} already present)")
        for run in report.runs:
            where = f" on {run['nodes']} node(s) ({', '.join(run['hosts'])})" if run["hosts"] else ""
            ranks = f", {'/'.join(map(str, run['ranks']))} ranks" if run["ranks"] else ""
            _plain(console, f"  run {run['run_id']}: {run['device']}{where}{ranks}; measured at "
                            f"{run['measured_at']} ({_time_words(run['time_source'])})")
    elif report.outcome == Outcome.NO_RESULT:
        _plain(console, f"{head}: holds no result: {report.why}")
    elif report.outcome == Outcome.NOT_RECOGNISED:
        _plain(console, f"{head}: {report.why}")
    for label, items in (("left out", report.left_out), ("disagrees", report.disagreements), ("note", report.notes)):
        items = [i for i in items if i not in report.why]  # a file with no result said its reasons already
        for item in items[:SHOWN]:
            _plain(console, f"  {label}: {item}")
        if len(items) > SHOWN:
            _plain(console, f"  ... and {len(items) - SHOWN} more {label} (--json lists them)")


def _time_words(source: str) -> str:
    from rooflab.runners.peer_import.results import TimeSource

    return {TimeSource.FILE: "the file's own time", TimeSource.OPTION: "--measured-at",
            TimeSource.MODIFIED: "the file's modification time: it gives no time of its own; give --measured-at"
            }.get(TimeSource(source), source)


def _summary(reports: list[FileReport]) -> dict[str, int]:
    return {"files": len(reports), "stored": sum(r.outcome == Outcome.STORED for r in reports),
            "results": sum(r.results for r in reports), "added": sum(r.added for r in reports),
            "already_present": sum(r.present for r in reports),
            "no_result": sum(r.outcome == Outcome.NO_RESULT for r in reports),
            "not_recognised": sum(r.outcome == Outcome.NOT_RECOGNISED for r in reports),
            "failed": sum(r.outcome == Outcome.FAILED for r in reports),
            "disagreements": sum(len(r.disagreements) for r in reports)}


def _run_all(url: str, files: list[Path], options: Any) -> list[FileReport]:
    from rich.progress import Progress

    reports: list[FileReport] = []
    with Progress(console=err_console, transient=True, disable=len(files) < 2 or not err_console.is_terminal) as bar:
        task = bar.add_task("importing", total=len(files))
        for path in files:
            bar.update(task, description=_escaped(f"importing {path.name}"[:60]))
            reports.append(import_one(url, path, options))
            bar.advance(task)
    return reports


def _legacy_export(paths: list[Path]) -> bool:
    """One file given, a rooflab export: imported and reported exactly as before."""
    if len(paths) != 1 or not paths[0].is_file():
        return False
    from rooflab.runners.peer_import.recognise import PeerFormat, recognise

    return recognise(paths[0]).format == PeerFormat.ROOFLAB_EXPORT


def import_cmd(
    paths: list[Path] = typer.Argument(..., help="Files or folders: rooflab exports (.csv, .jsonl, .parquet, "
                                       "optionally .gz), nccl-tests / rccl-tests output or JSON, nvbench JSON, "
                                       "BabelStream CSV or table; recognised by their content."),
    measured_at: str | None = typer.Option(None, "--measured-at", help="When the results were measured, for files "
                                           "that give no time of their own (ISO time; without a zone: UTC). "
                                           "Default: the file's modification time."),
    device_name: str | None = typer.Option(None, "--device-name", help="The GPU, for files that name none "
                                           "(BabelStream output without device lines, rccl-tests' JSON and CSV)."),
    ranks: int | None = typer.Option(None, "--ranks", min=2, help="The world size, for rccl-tests' JSON and CSV "
                                     "written without their `gpus` field (MPI builds)."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Import results: a rooflab export, or the peers' own output files (importing twice adds nothing)."""
    from rooflab.runners.cli.db_cmd import import_export
    from rooflab.runners.peer_import.files import ImportOptions

    missing = [p for p in paths if not p.exists()]
    if missing:
        fail(f"no such file or folder: {_escaped(str(missing[0]))}")
    url = db_url(db)
    if _legacy_export(paths):
        import_export(paths[0], url, as_json)
        return
    options = ImportOptions(measured_at=_measured_at(measured_at), device_name=device_name, ranks=ranks)
    files = list(_files(paths))
    reports = _run_all(url, files, options)
    _finish(reports, paths, as_json)


def _escaped(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _finish(reports: list[FileReport], paths: list[Path], as_json: bool) -> None:
    summary = _summary(reports)
    if as_json:
        print_json({"files": [r.as_dict() for r in reports], "summary": summary})
    else:
        for report in reports:
            if report.outcome != Outcome.FAILED:
                _print_report(report)
        _plain(console, f"{summary['files']} files read: {summary['stored']} imported ({summary['added']} results "
                        f"added, {summary['already_present']} already present), {summary['no_result']} with no "
                        f"result, {summary['not_recognised']} not recognised, {summary['failed']} failed")
    for report in reports:
        if report.outcome == Outcome.FAILED:
            print_error(_escaped(report.why) + " (nothing of this file was written)")
    # a file named on the command line must be read; one found in a folder may be anything else
    named = {p for p in paths if p.is_file()}
    unread = [r for r in reports if r.outcome == Outcome.NOT_RECOGNISED and r.path in named]
    for report in unread:
        print_error(_escaped(f"{report.path}: not recognised: {report.why}"))
    if summary["failed"] or unread:
        raise typer.Exit(ExitCode.BAD_INPUT)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("import")(import_cmd)
