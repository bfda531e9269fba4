"""What `rooflab run` reports when it ends: `RunSummary.to_dict()` (runners/orchestration/session.py),
its `--json` output, which the end-of-run table (progress.render_summary) and the nightly read.
Typed dicts, in a module of their own so that the session and the display share them without
importing each other."""
from __future__ import annotations

from typing import TypedDict


class SlowCase(TypedDict):
    """One of a run's slowest results, as its summary lists it."""

    case_key: str
    device: str  # the lane's device, or a collective's group (`cpu x2 (gloo)`)
    median_ms: float | None
    gbps: float | None
    tflops: float | None
    elapsed_s: float


class SummaryDict(TypedDict):
    """`RunSummary.to_dict()`: the `--json` output of `rooflab run`, and what the end-of-run table shows."""

    run_id: str
    suite: str
    status: str
    exit_code: int
    db_url: str
    shard: str | None
    devices: list[dict[str, str | int | None]]  # the lanes (LaneReport's fields)
    selected_cases: int
    counts: dict[str, int]
    already_measured: int
    unmeasured: int
    elapsed_s: float
    slowest: list[SlowCase]
