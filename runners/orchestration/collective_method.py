"""How a rank group's result was measured (the record's TimingMethod), for a collective case and for a
pair of the link matrix alike: no cache flush, the group's clock, warmup and sampling."""
from __future__ import annotations

from typing import Protocol

from rooflab.record import TimingMethod
from rooflab.suite.case import Case
from rooflab.vocab import FlushMethod


class GroupTimed(Protocol):
    """What a group's timing (runners.engine.group_timing.GroupTiming, pair_timing.RoundTiming) says of
    its method (read-only: the timings are frozen records)."""

    @property
    def clock(self) -> str: ...

    @property
    def warmup_calls(self) -> int: ...

    @property
    def calls_per_sample(self) -> int: ...

    @property
    def sync_method(self) -> str: ...

    @property
    def warmup_ms(self) -> float: ...

    @property
    def sampling_ms(self) -> float: ...

    @property
    def pace(self) -> str: ...


def collective_method(case: Case, timing: GroupTimed, *, stop_reason: str, first_call_ms: float) -> TimingMethod:
    """The TimingMethod of a result a rank group measured."""
    return TimingMethod(
        cache=case.cache, timing_mode=case.timing_mode, clock=timing.clock, stop_reason=stop_reason,
        first_call_ms=first_call_ms, warmup_calls=timing.warmup_calls, launches_per_sample=timing.calls_per_sample,
        flush_bytes=0, sync_method=timing.sync_method, flush_method=FlushMethod.NONE, warmup_ms=timing.warmup_ms,
        sampling_ms=timing.sampling_ms, pace=timing.pace,
    )
