"""CLI: `fleet`: which devices of a fleet got slower than their siblings tonight (reports/fleet judges;
docs/fleet.md)."""
from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from rooflab.db.errors import DatabaseInputError
from rooflab.db.timeparse import parse_since
from rooflab.reports.fleet.link_records import LinksNight
from rooflab.reports.fleet.night import judge_links_night, judge_night
from rooflab.reports.fleet.options import DEFAULT_SUITE, FleetOptions
from rooflab.reports.fleet.records import DeviceJudgement, FleetNight
from rooflab.reports.fleet.status import FLAGGED, FleetFailOn, FleetStatus, parse_fleet_fail_on
from rooflab.runners.cli.common import DbOption, JsonOption, db_url, require_database
from rooflab.runners.cli.epilogue import console, fail, respond

DEFAULTS = FleetOptions()
LINKS_SUITE = "links"  # the suite `--links` judges by default
SHOWN_UNJUDGED = 5

FLEET_HELP = """Which devices (and nodes) got slower than their siblings of the same model tonight.

The night is the suite's runs within 24 h of its newest (or of --at, or of --run's night); each
device is judged wall by wall (HBM, matrix, elementary, launch, interconnect) against the fleet's
median with a 95 % interval and a robust z, and against its own past place among its siblings:
ok, suspect (one night beyond the warn line), slow (confirmed), drain, or not_judged (too few
siblings). A shift of every device at once is reported once, as a fleet shift. Exit code 1 when
a device's status matches --fail-on; 2 on invalid input (no database, no run of the suite)."""

def fleet_command(
    db: str | None = DbOption,
    suite: str | None = typer.Option(None, "--suite", help=f"The suite whose nights are judged [default: "
                                     f"{DEFAULT_SUITE}; with --links, {LINKS_SUITE}]."),
    at: str | None = typer.Option(None, "--at", help="Judge the night of the newest run at or before this time "
                                  "(a date or an ISO datetime; default: the newest night)."),
    run: str | None = typer.Option(None, "--run", help="Judge the night this run belongs to."),
    min_devices: int = typer.Option(DEFAULTS.min_devices, "--min-devices",
                                    help="Judge a case where at least this many devices of a model measured it."),
    warn: float = typer.Option(DEFAULTS.warn_pct, "--warn", help="Warn threshold, percent slower than the fleet."),
    drain: float = typer.Option(DEFAULTS.drain_pct, "--drain", help="Drain threshold, percent slower."),
    fail_on: str = typer.Option(str(FleetFailOn.DRAIN), "--fail-on",
                                help="Exit 1 when a device is at this status or worse: never|suspect|slow|drain."),
    links: bool = typer.Option(False, "--links", help="Judge the night's link matrices instead (rooflab run links): "
                               "each pair against its siblings, the slow links and the slow GPUs, nodes or ranks."),
    as_json: bool = JsonOption,
) -> None:
    try:
        rule = parse_fleet_fail_on(fail_on)
        when = parse_since(at, option="--at")
        chosen = suite or (LINKS_SUITE if links else DEFAULT_SUITE)
        options = FleetOptions(suite=chosen, at=when, min_devices=min_devices, warn_pct=warn, drain_pct=drain)
    except (ValueError, DatabaseInputError) as exc:
        fail(escape(str(exc)))
    if at is not None and run is not None:
        fail("give --at or --run, not both")
    url = db_url(db)
    require_database(url)

    if links:
        respond(lambda: judge_links_night(url, options, run_id=run), as_json=as_json,
                to_json=lambda night: {**night.as_dict(), "fail_on": str(rule), "failed": night.fails(rule)},
                show=_show_links, exit_code=lambda night: int(night.fails(rule)),
                failing_note=lambda night: f"links: an end or a link at {rule} or worse (--fail-on {rule})")
        return
    respond(lambda: judge_night(url, options, run_id=run), as_json=as_json,
            to_json=lambda night: {**night.as_dict(), "fail_on": str(rule), "failed": night.fails(rule)},
            show=_show, exit_code=lambda night: int(night.fails(rule)),
            failing_note=lambda night: _failing(night, rule))


def _failing(night: FleetNight, rule: FleetFailOn) -> str:
    failing = [d for d in night.devices if rule.fails(d.status)]
    return f"fleet: {len(failing)} device(s) at {rule} or worse (--fail-on {rule})"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.2f} %"


def _walls(device: DeviceJudgement) -> str:
    return "; ".join(f"{w} {j.deviation_pct:+.1f} % [{j.low_pct:+.1f}, {j.high_pct:+.1f}] z {j.z:.1f}"
                     f"{' (' + str(j.status) + ')' if j.status != device.status else ''}"
                     for w, j in device.walls.items() if j.status in FLAGGED)


def _show(night: FleetNight) -> None:
    n = night.night
    counts = ", ".join(f"{night.count(s)} {s}" for s in FleetStatus)
    console.print(f"fleet: {escape(n.suite)}, night of {n.first_run_at:%Y-%m-%d %H:%M} UTC ({len(n.run_ids)} runs, "
                  f"{n.history_nights} nights of history); {len(night.devices)} devices: {counts}",
                  highlight=False, soft_wrap=True)
    flagged_nodes = [node for node in night.nodes if node.status in FLAGGED]
    if flagged_nodes:
        console.print("nodes: " + ", ".join(f"{escape(node.host)} {node.status} ({escape(str(node.worst_device))})"
                                            for node in flagged_nodes), highlight=False, soft_wrap=True)
    if night.flagged:
        table = Table(show_edge=False)
        for column in ("status", "host", "device", "flagged walls: deviation [95 % interval], robust z", "since",
                       "own history"):
            table.add_column(column, overflow="fold")
        for d in sorted(night.flagged, key=lambda d: (-list(FleetStatus).index(d.status), d.host, d.device_key)):
            since = "" if d.since is None else f"{d.since:%Y-%m-%d}{' or before' if d.since_open else ''}"
            table.add_row(str(d.status), escape(d.host), escape(d.device_key), escape(_walls(d)), since,
                          str(d.history_verdict))
        console.print(table)
    for s in night.fleet_shifts:
        what = f"{s.wall} wall" if s.case_key is None else s.case_key
        console.print(f"fleet shift: {escape(s.device_name)} {escape(what)} {s.direction} {_pct(s.shift_pct)} "
                      f"({_pct(s.low_pct)}..{_pct(s.high_pct)}), {s.devices_moved} of {s.devices} devices moved"
                      f"{f', since {s.since:%Y-%m-%d}' if s.since else ''}", highlight=False, soft_wrap=True)
    unjudged = [d for d in night.devices if d.status == FleetStatus.NOT_JUDGED]
    for d in unjudged[:SHOWN_UNJUDGED]:
        console.print(f"not judged: {escape(d.host)} {escape(d.device_key)}: {escape(str(d.reason))}",
                      highlight=False, soft_wrap=True)
    if len(unjudged) > SHOWN_UNJUDGED:
        console.print(f"... and {len(unjudged) - SHOWN_UNJUDGED} more not judged (--json lists them)", highlight=False)
    if night.missing_devices:
        console.print("missing tonight (reported last night): " + escape(", ".join(night.missing_devices)),
                      highlight=False, soft_wrap=True)


def _show_links(night: LinksNight) -> None:
    """The links night: counts, then the flagged ends (GPUs, nodes, ranks) and the slow links."""
    n, counts = night.night, night.counts()
    summary = "; ".join(f"{what}: " + ", ".join(f"{c} {s}" for s, c in by.items() if c) for what, by in counts.items())
    console.print(f"links: {escape(n.suite)}, night of {n.first_run_at:%Y-%m-%d %H:%M} UTC ({len(n.run_ids)} runs, "
                  f"{len(night.matrices)} matrices); {summary}", highlight=False, soft_wrap=True)
    for e in night.flagged_ends:
        j = e.judged
        assert j is not None  # a flagged end was judged
        what = "node" if e.kind == "across_nodes" else "end"
        console.print(f"slow {what}: {escape(e.end)} ({escape(e.host)}) {e.status}: its pairs {j.deviation_pct:+.1f} % "
                      f"[{j.low_pct:+.1f}, {j.high_pct:+.1f}] against its siblings'", highlight=False, soft_wrap=True)
    for k in night.slow_links:
        r = k.residual
        assert r is not None  # a slow link was judged
        console.print(f"slow link: {escape(k.a)} - {escape(k.b)} {k.status}: {r.deviation_pct:+.1f} % "
                      f"[{r.low_pct:+.1f}, {r.high_pct:+.1f}] once its ends are accounted for", highlight=False,
                      soft_wrap=True)
    for e in night.ends:
        if e.reason:
            console.print(f"not judged: {escape(e.end)}: {escape(e.reason)}", highlight=False, soft_wrap=True)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("fleet", help=FLEET_HELP)(fleet_command)
