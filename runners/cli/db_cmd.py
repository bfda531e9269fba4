"""CLI: `export`, the import of an export file (the `import` verb: runners/cli/import_cmd.py), and the `db`
group (`upgrade`, `current`, `merge`, `prune`)."""
from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from rooflab.db.export import export
from rooflab.db.importer import import_file
from rooflab.db.merge import merge
from rooflab.db.prune import prune_samples
from rooflab.db.schema import head_revision, read_state, upgrade
from rooflab.db.timeparse import parse_duration
from rooflab.db.urls import redact
from rooflab.runners.cli.common import DbOption, JsonOption, db_url, require_database
from rooflab.runners.cli.epilogue import conclude, console, err_console, fail, guarded, respond
from rooflab.vocab import ExitCode

if TYPE_CHECKING:  # the database's modules load SQLAlchemy: only when a command runs
    from rich.console import Console

    from rooflab.db.importer import ImportResult
    from rooflab.db.merge import MergeResult
    from rooflab.db.prune import PruneResult


def export_cmd(
    fmt: str = typer.Option(..., "--format", "-f", help="csv, jsonl or parquet."),
    run: str | None = typer.Option(None, "--run", help="Only this run id."),
    since: str | None = typer.Option(None, "--since", help="Only runs started on/after this date (UTC)."),
    out: Path | None = typer.Option(None, "--out", "-o",
                                       help="Output file (.gz compresses csv/jsonl); stdout if omitted."),
    db: str | None = DbOption,
) -> None:
    """Export results, the standard export columns first (one row per measurement; docs/design.md)."""
    def show(count: int) -> None:
        if out is not None:
            err_console.print(f"exported {count} rows to {escape(str(out))}", highlight=False, soft_wrap=True)

    respond(lambda: export(db_url(db), fmt.lower(), out, run_id=run, since=since), show=show)


def import_export(file: Path, url: str, as_json: bool) -> None:
    """Import a rooflab export file (validated in full first; importing twice adds nothing): the
    `import` verb (runners/cli/import_cmd.py) hands a single export here."""
    def to_json(result: ImportResult) -> dict[str, object]:
        c = result.counts
        return {"file": str(file), "rows": result.rows, "measurements_added": c.measurements,
                "measurements_present": c.skipped, "runs_added": c.runs, "cases_added": c.cases,
                "environments_added": c.environments}

    def show(result: ImportResult) -> None:
        c = result.counts
        console.print(
            f"{escape(str(file))}: {result.rows} rows, {c.measurements} measurements added, {c.skipped} already "
            f"present ({c.runs} new runs, {c.cases} new cases, {c.environments} new devices) into "
            f"{escape(redact(url))}", highlight=False, soft_wrap=True,
        )

    respond(lambda: import_file(url, file), as_json=as_json, to_json=to_json, show=show)


def upgrade_cmd(db: str | None = DbOption) -> None:
    """Upgrade the database schema to this rooflab's revision (creates a new database)."""
    url = db_url(db)

    def show(revisions: tuple[str | None, str]) -> None:
        before, after = revisions
        if before == after:
            console.print(f"{escape(redact(url))} is already at schema revision {after}", highlight=False,
                          soft_wrap=True)
        else:
            console.print(f"{escape(redact(url))}: schema revision {before or '(new)'} -> {after}", highlight=False,
                          soft_wrap=True)

    respond(lambda: upgrade(url), show=show)


def current_cmd(db: str | None = DbOption, as_json: bool = JsonOption) -> None:
    """Show the database's schema revision and this rooflab's."""
    url = db_url(db)
    respond(lambda: read_state(url), as_json=as_json,
            to_json=lambda state: {"db": redact(url), "state": state.kind, "revision": state.revision,
                                   "head": head_revision()},
            show=lambda state: console.print(f"{escape(redact(url))}: {state.kind} (revision {state.revision or '-'}; "
                                             f"this rooflab: {head_revision()})", highlight=False, soft_wrap=True))


def merge_cmd(
    sources: list[str] = typer.Argument(..., help="Node-local SQLite files (or URLs) to merge."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Merge node-local result databases (with raw samples) into the target; idempotent."""
    url = db_url(db)

    def show(results: list[MergeResult]) -> None:
        for r in results:
            console.print(
                f"{escape(r.source)}: {r.runs_seen} runs, {r.counts.measurements} measurements added "
                f"({r.counts.samples} with samples), {r.counts.skipped} already present; "
                f"{r.counts.crosschecks} cross-checks, {r.counts.layer_profiles} layer profiles and "
                f"{r.counts.counters} counter readings added",
                highlight=False, soft_wrap=True,
            )
        console.print(f"target: {escape(redact(url))}", highlight=False, soft_wrap=True)

    respond(lambda: merge(url, sources), as_json=as_json, show=show,
            to_json=lambda results: [
                {"source": r.source, "runs": r.runs_seen, "measurements_added": r.counts.measurements,
                 "measurements_present": r.counts.skipped, "samples_added": r.counts.samples,
                 "crosschecks_added": r.counts.crosschecks, "layer_profiles_added": r.counts.layer_profiles,
                 "counters_added": r.counts.counters} for r in results])


def _interactive() -> bool:
    """Whether a person can answer a question on stdin."""
    return sys.stdin.isatty()


def prune_cmd(
    samples_older_than: str = typer.Option(
        ..., "--samples-older-than",
        help="Age by run start: a whole number with a unit s, min, h, d, w, mo (30 days) or y (365 days), "
        "e.g. 90d, 12w, 6mo. `m` is refused (minutes or months?).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would be removed."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking (needed when stdin is not a terminal)."),
    vacuum: bool = typer.Option(False, "--vacuum", help="SQLite: shrink the file afterwards."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Remove raw samples of old runs; summaries (median, percentiles, ...) are kept.

    Shows what would go first, then asks (or goes on with --yes).
    """
    url = db_url(db)
    age = guarded(lambda: parse_duration(samples_older_than, option="--samples-older-than"))
    require_database(url)
    now = datetime.now(UTC)
    plan = guarded(lambda: prune_samples(url, age, dry_run=True, now=now))
    if dry_run or plan.measurements == 0:
        conclude(plan, as_json=as_json, to_json=_prune_json, show=_show_prune)
        return
    if not yes:
        if not _interactive():
            _show_prune(plan, to=err_console)
            fail("stdin is not a terminal, so nobody can confirm: add --yes to remove these samples "
                 "(or --dry-run to only see what would go); nothing was removed")
        _show_prune(plan)
        if not typer.confirm("Remove them?", default=False):
            err_console.print("nothing removed", highlight=False)
            raise typer.Exit(ExitCode.FAILED)
    respond(lambda: prune_samples(url, age, vacuum=vacuum, now=now), as_json=as_json, to_json=_prune_json,
            show=_show_prune)


def _prune_json(result: PruneResult) -> dict[str, object]:
    return {"cutoff": result.cutoff.isoformat(), "runs": result.runs, "measurements": result.measurements,
            "sample_values": result.sample_values, "bytes": result.bytes, "dry_run": result.dry_run,
            "vacuumed": result.vacuumed, "run_ids": list(result.run_ids)}


def _show_prune(result: PruneResult, to: Console | None = None) -> None:
    out = to or console
    verb = "would remove" if result.dry_run else "removed"
    out.print(
        f"{verb} raw samples of {result.measurements} measurements ({result.sample_values} values, "
        f"{result.bytes / 1e6:.1f} MB) from {result.runs} runs started before {result.cutoff:%Y-%m-%d %H:%M} UTC; "
        "summaries kept" + ("; file vacuumed" if result.vacuumed else ""),
        highlight=False, soft_wrap=True,
    )
    if result.dry_run and result.run_ids:
        shown = ", ".join(result.run_ids[:10])
        more = f" and {len(result.run_ids) - 10} more" if len(result.run_ids) > 10 else ""
        out.print(f"runs: {escape(shown)}{more}", highlight=False, soft_wrap=True)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("export")(export_cmd)
    db_app.command("upgrade")(upgrade_cmd)
    db_app.command("current")(current_cmd)
    db_app.command("merge")(merge_cmd)
    db_app.command("prune")(prune_cmd)
