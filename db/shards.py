"""Shards of a run: the one rule for a shard's text (I/N), what the database knows of each shard, and
a run's status once all its shards have finished (the worst of theirs).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select, update

from rooflab.db import models
from rooflab.db.errors import DatabaseInputError
from rooflab.vocab import FINISHED_RANK, RunStatus

_SHARD = re.compile(r"^(\d+)/(\d+)$")


@dataclass(frozen=True)
class ShardStatus:
    """One shard of a run as the database knows it."""

    shard: str  # "I/N"
    shard_count: int
    host: str
    status: str  # a RunStatus
    started_at: datetime
    finished_at: datetime | None


class ShardFormatError(DatabaseInputError):
    """A shard's text is not I/N with 0 <= I < N; `reason` says which part is wrong."""

    def __init__(self, shard: object, reason: str) -> None:
        super().__init__(f"invalid shard {shard!r}: {reason}")
        self.reason = reason


def parse_shard(shard: str) -> tuple[int, int]:
    """`"I/N"` -> (I, N), the 0-based index I of N shards: the one rule for a shard's text, stored,
    imported or given on the command line (runners.orchestration.shards.parse_shard); ShardFormatError otherwise."""
    match = _SHARD.match(shard.strip()) if isinstance(shard, str) else None
    if match is None:
        raise ShardFormatError(
            shard, "expected I/N with whole numbers, the 0-based shard index I of N shards (e.g. 0/4 ... 3/4)"
        )
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise ShardFormatError(shard, "the shard count N must be at least 1")
    if index >= count:
        raise ShardFormatError(shard, f"the shard index I must be in 0..{count - 1} (0-based)")
    return index, count


def aggregate_shards(conn: Connection, run_pk: int) -> None:
    """Once all N shards of a run have finished, give the run the worst of their statuses."""
    shards = conn.execute(
        select(models.RunShard.status, models.RunShard.shard_count, models.RunShard.finished_at).where(
            models.RunShard.run_id == run_pk
        )
    ).all()
    if not shards:
        return
    expected = max(s.shard_count for s in shards)
    finished = [s for s in shards if s.status != RunStatus.RUNNING]
    if len(finished) >= expected and len(finished) == len(shards):
        failed_rank = FINISHED_RANK[RunStatus.FAILED]
        worst = max((s.status for s in finished), key=lambda status: FINISHED_RANK.get(status, failed_rank))
        last = max(s.finished_at for s in finished if s.finished_at is not None) if any(
            s.finished_at is not None for s in finished) else None
        conn.execute(update(models.Run).where(models.Run.id == run_pk).values(status=worst, finished_at=last))
