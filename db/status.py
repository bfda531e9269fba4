"""The fixed sets of statuses the database stores: one result's, one run's (or shard's).

StrEnum members equal their strings, so stored values, DataFrame columns and JSON keep plain text.
"""
from __future__ import annotations

from enum import StrEnum


class ResultStatus(StrEnum):
    """What became of one case on one device."""

    OK = "ok"  # measured and correct
    INCORRECT = "incorrect"  # the output did not match the reference
    FAILED = "failed"  # the op raised
    CRASHED = "crashed"  # the worker died, timed out or lost its device context
    SKIPPED = "skipped"  # the case cannot run here (dtype, backend, memory, mode)


# results that are a fault of the op or of the machine (not a skip)
FAULTS = (ResultStatus.INCORRECT, ResultStatus.FAILED, ResultStatus.CRASHED)
# a cross-check of a peer timer: no worker of its own, so it cannot crash
CHECK_STATUSES = (ResultStatus.OK, ResultStatus.SKIPPED, ResultStatus.FAILED, ResultStatus.INCORRECT)


class RunStatus(StrEnum):
    """Where a run (or one shard of it) stands.

    complete: every case of the run's spec has a result on every device of the run; partial: the run
    finished what it was asked, but filters left cases of its spec without a result."""

    RUNNING = "running"
    COMPLETE = "complete"
    PARTIAL = "partial"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


# how bad a finished status is, for the status of a run made of shards (the worst of them)
FINISHED_RANK = {RunStatus.COMPLETE: 0, RunStatus.PARTIAL: 1, RunStatus.INTERRUPTED: 2, RunStatus.FAILED: 3}


def allowed(values: type[StrEnum] | tuple[StrEnum, ...]) -> str:
    """`a, b, c`: the values of a fixed set, for a message."""
    return ", ".join(str(v) for v in values)
