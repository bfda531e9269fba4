"""The link matrix's judgement of one night as typed records, and their JSON form (`rooflab fleet
--links --json`: `ends` and `links`).

Figures are percents of speed, negative slower, as the fleet's (records.py): an end's `deviation`
is how much slower its pairs are than its siblings' pairs once the other ends are accounted for; a
link's `deviation` is the pair against its siblings' common level, its `residual` what is left once
both of its ends are accounted for.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import NightInfo
from rooflab.reports.fleet.status import FLAGGED, FleetFailOn, FleetStatus


class LinkKind(StrEnum):
    """Which siblings a pair is judged among: the pairs within a node, or the pairs of nodes."""

    SAME_NODE = "same_node"
    ACROSS_NODES = "across_nodes"


class LinkCause(StrEnum):
    """Why a pair is flagged: the pair itself (a slow link: both ends fine elsewhere), or a slow end."""

    LINK = "link"
    END_A = "a"
    END_B = "b"
    BOTH_ENDS = "both"


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(float(value), digits)


@dataclass(frozen=True)
class Judged:
    """A figure judged against its siblings: status, deviation with its 95 % interval, robust z, lines."""

    status: FleetStatus
    deviation_pct: float
    low_pct: float
    high_pct: float
    z: float
    spread_pct: float
    warn_line_pct: float
    drain_line_pct: float

    def as_dict(self) -> dict:
        return {"status": str(self.status), "deviation": _round(self.deviation_pct), "low": _round(self.low_pct),
                "high": _round(self.high_pct), "z": _round(self.z, 2), "spread": _round(self.spread_pct),
                "warn_line": _round(self.warn_line_pct), "drain_line": _round(self.drain_line_pct)}


@dataclass(frozen=True)
class EndJudgement:
    """One end of the matrix tonight (a GPU, a node, or a CPU's rank): all of its pairs together."""

    end: str  # its label: the node across nodes; the device key within one (host:rankR when ranks share one)
    host: str
    device_key: str
    kind: LinkKind
    device_name: str
    judged: Judged | None  # None: not judged (`reason`)
    pairs: int  # its pairs tonight, over every matrix
    reason: str | None = None

    @property
    def status(self) -> FleetStatus:
        return self.judged.status if self.judged is not None else FleetStatus.NOT_JUDGED

    def as_dict(self) -> dict:
        return {"end": self.end, "host": self.host, "device_key": self.device_key, "kind": str(self.kind),
                "device_name": self.device_name, "pairs": self.pairs, "reason": self.reason,
                **(self.judged.as_dict() if self.judged is not None else {"status": str(FleetStatus.NOT_JUDGED)})}


@dataclass(frozen=True)
class LinkJudgement:
    """One pair of ends tonight, over every matrix it was measured in."""

    a: str
    b: str
    a_host: str
    a_device: str
    b_host: str
    b_device: str
    kind: LinkKind
    status: FleetStatus
    cause: LinkCause | None  # why it is flagged (None when it is not)
    deviation_pct: float  # the pair against its siblings' common level (negative: slower)
    low_pct: float
    high_pct: float
    residual: Judged | None  # the pair once its ends are accounted for (None: not judged)
    matrices: int  # matrices (sizes, directions) it was measured in tonight
    median_ms: float  # its median time in the first of them

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "a_host": self.a_host, "a_device": self.a_device, "b_host": self.b_host,
                "b_device": self.b_device, "kind": str(self.kind), "status": str(self.status),
                "cause": None if self.cause is None else str(self.cause), "deviation": _round(self.deviation_pct),
                "low": _round(self.low_pct), "high": _round(self.high_pct),
                "residual": None if self.residual is None else self.residual.as_dict(), "matrices": self.matrices,
                "median_ms": self.median_ms}


@dataclass(frozen=True)
class LinksNight:
    """The judgement of one links night: every end, every link."""

    night: NightInfo
    options: FleetOptions
    ends: tuple[EndJudgement, ...]
    links: tuple[LinkJudgement, ...]
    matrices: tuple[str, ...]  # the matrix cases judged

    def counts(self) -> dict[str, dict[str, int]]:
        return {"ends": {str(s): sum(e.status == s for e in self.ends) for s in FleetStatus},
                "links": {str(s): sum(k.status == s for k in self.links) for s in FleetStatus}}

    @property
    def flagged_ends(self) -> tuple[EndJudgement, ...]:
        return tuple(e for e in self.ends if e.status in FLAGGED)

    @property
    def slow_links(self) -> tuple[LinkJudgement, ...]:
        """The pairs flagged for themselves, their ends fine elsewhere."""
        return tuple(k for k in self.links if k.cause is LinkCause.LINK)

    def fails(self, fail_on: FleetFailOn) -> bool:
        """Whether an end or a link is at the `fail_on` status or worse (exit 1)."""
        return any(fail_on.fails(e.status) for e in self.ends) or any(fail_on.fails(k.status) for k in self.links)

    def as_dict(self) -> dict:
        o = self.options
        return {"night": self.night.as_dict(),
                "options": {"suite": o.suite, "min_devices": o.min_devices, "warn": o.warn_pct, "drain": o.drain_pct},
                "counts": self.counts(), "matrices": list(self.matrices),
                "ends": [e.as_dict() for e in self.ends], "links": [k.as_dict() for k in self.links]}
