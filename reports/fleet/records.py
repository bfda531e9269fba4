"""The fleet's judgement of one night as typed records, and their JSON form (`rooflab fleet --json`).

Figures are percents of speed against the fleet (negative: slower), as the JSON keys of the issue
that asked for them name them: `deviation`, `low`, `high` (the 95 % interval), `z` (the robust z).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.status import FLAGGED, FleetFailOn, FleetStatus
from rooflab.reports.regressions.verdicts import Verdict


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(float(value), digits)


@dataclass(frozen=True)
class CaseEvidence:
    """One case of a device tonight against the fleet's median of it."""

    case_key: str
    wall: str | None  # a CeilingKind value, or None for a case that tells no wall alone
    deviation_pct: float
    median_ms: float
    fleet_median_ms: float
    devices: int  # devices of the model that measured it tonight
    throttled: bool
    quality: str | None

    def as_dict(self) -> dict:
        return {"case_key": self.case_key, "wall": self.wall, "deviation": _round(self.deviation_pct),
                "median_ms": self.median_ms, "fleet_median_ms": self.fleet_median_ms, "devices": self.devices,
                "throttled": self.throttled, "quality": self.quality}


@dataclass(frozen=True)
class OwnHistory:
    """A device wall against its own past place in the fleet (a fleet-wide shift does not move it)."""

    verdict: Verdict
    change_pct: float | None  # tonight's deviation minus the median of the history nights'
    z: float | None
    nights: int  # history nights it had

    def as_dict(self) -> dict:
        return {"verdict": str(self.verdict), "change": _round(self.change_pct), "z": _round(self.z, 2),
                "nights": self.nights}


@dataclass(frozen=True)
class WallJudgement:
    """One wall of one device tonight."""

    wall: str
    status: FleetStatus
    deviation_pct: float
    low_pct: float
    high_pct: float
    z: float
    spread_pct: float  # the robust spread of the wall's deviations over the fleet and the pooled nights
    warn_line_pct: float  # beyond -warn_line_pct is beyond the warn line (robust.warn_line_pct)
    drain_line_pct: float
    cases: int
    since: datetime | None  # the first night of its current flagged streak (None when ok) ...
    since_open: bool  # ... the oldest night read: the streak may have begun before it
    history: OwnHistory
    trend: tuple[tuple[datetime, float], ...] = ()  # (night, deviation) oldest first; flagged walls only

    def as_dict(self) -> dict:
        return {"status": str(self.status), "deviation": _round(self.deviation_pct), "low": _round(self.low_pct),
                "high": _round(self.high_pct), "z": _round(self.z, 2), "spread": _round(self.spread_pct),
                "warn_line": _round(self.warn_line_pct), "drain_line": _round(self.drain_line_pct),
                "cases": self.cases, "since": _time(self.since), "since_open": self.since_open,
                "history": self.history.as_dict(),
                "trend": [[_time(t), _round(d)] for t, d in self.trend]}


@dataclass(frozen=True)
class DeviceJudgement:
    """One physical device (a GPU's UUID, a CPU core's host and core) tonight."""

    device_key: str
    device_uuid: str | None
    host: str
    device_name: str
    memory_bytes: int
    status: FleetStatus
    siblings: int  # devices of its model in tonight's night, itself included
    walls: Mapping[str, WallJudgement] = field(default_factory=dict)
    since: datetime | None = None  # the earliest `since` of its flagged walls
    since_open: bool = False  # that streak reaches the oldest night read (it may have begun before)
    history_verdict: Verdict = Verdict.INSUFFICIENT_DATA  # its worst wall's own-history verdict
    faults: int = 0  # tonight's results that failed, crashed or were incorrect
    reason: str | None = None  # why it was not judged
    evidence: tuple[CaseEvidence, ...] = ()  # its cases tonight (every case, flagged devices only)

    def as_dict(self) -> dict:
        return {"device_key": self.device_key, "device_uuid": self.device_uuid, "host": self.host,
                "device_name": self.device_name, "memory_bytes": self.memory_bytes, "status": str(self.status),
                "siblings": self.siblings, "walls": {w: j.as_dict() for w, j in self.walls.items()},
                "since": _time(self.since), "since_open": self.since_open,
                "history_verdict": str(self.history_verdict), "faults": self.faults,
                "reason": self.reason, "evidence": [e.as_dict() for e in self.evidence]}


@dataclass(frozen=True)
class NodeJudgement:
    """A node (host) takes its worst device's status."""

    host: str
    status: FleetStatus
    worst_device: str | None  # its device_key
    devices: int

    def as_dict(self) -> dict:
        return {"host": self.host, "status": str(self.status), "worst_device": self.worst_device,
                "devices": self.devices}


@dataclass(frozen=True)
class FleetShift:
    """Every device of a model moved at once on a wall (or on one case of a wall that did not move as
    a whole): a software, driver or site change, reported once instead of as N slow devices."""

    device_name: str
    memory_bytes: int
    wall: str
    case_key: str | None  # None: the wall as a whole
    shift_pct: float  # the fleet's median tonight against the median of its history nights
    low_pct: float
    high_pct: float
    line_pct: float
    devices_moved: int  # devices whose own figure moved the same way by at least half the shift
    devices: int
    since: datetime | None

    @property
    def direction(self) -> str:
        return "slower" if self.shift_pct < 0 else "faster"

    def as_dict(self) -> dict:
        return {"device_name": self.device_name, "memory_bytes": self.memory_bytes, "wall": self.wall,
                "case_key": self.case_key, "direction": self.direction, "shift": _round(self.shift_pct),
                "low": _round(self.low_pct), "high": _round(self.high_pct), "line": _round(self.line_pct),
                "devices_moved": self.devices_moved, "devices": self.devices, "since": _time(self.since)}


@dataclass(frozen=True)
class ModelSummary:
    """One model (device name and memory) of the night."""

    device_name: str
    memory_bytes: int
    devices: int
    cases_judged: int  # cases measured tonight on at least min_devices of its devices
    cases_too_few: int  # cases measured tonight on fewer

    def as_dict(self) -> dict:
        return {"device_name": self.device_name, "memory_bytes": self.memory_bytes, "devices": self.devices,
                "cases_judged": self.cases_judged, "cases_too_few": self.cases_too_few}


@dataclass(frozen=True)
class NightInfo:
    """Which runs the night judged is made of, and how much history was behind it."""

    suite: str
    first_run_at: datetime
    last_run_at: datetime
    run_ids: tuple[str, ...]
    history_nights: int  # nights before it that were read

    def as_dict(self) -> dict:
        return {"suite": self.suite, "first_run_at": _time(self.first_run_at), "last_run_at": _time(self.last_run_at),
                "runs": list(self.run_ids), "history_nights": self.history_nights}


@dataclass(frozen=True)
class FleetNight:
    """The judgement of one night: every device, every node, the fleet's shifts."""

    night: NightInfo
    options: FleetOptions
    devices: tuple[DeviceJudgement, ...]
    nodes: tuple[NodeJudgement, ...]
    fleet_shifts: tuple[FleetShift, ...]
    models: tuple[ModelSummary, ...]
    missing_devices: tuple[str, ...] = ()  # device keys of last night that did not report tonight

    def count(self, status: FleetStatus) -> int:
        return sum(1 for d in self.devices if d.status == status)

    @property
    def flagged(self) -> tuple[DeviceJudgement, ...]:
        return tuple(d for d in self.devices if d.status in FLAGGED)

    def fails(self, fail_on: FleetFailOn) -> bool:
        """Whether a device's status fails the night under `fail_on` (exit 1)."""
        return any(fail_on.fails(d.status) for d in self.devices)

    def brief(self) -> dict:
        """What a night's summary says of the fleet (`rooflab nightly`'s summary.json): the counts, the
        flagged devices with their flagged walls, the flagged nodes and the fleet's shifts."""
        return {
            "night": self.night.as_dict(), "counts": {str(s): self.count(s) for s in FleetStatus},
            "devices": len(self.devices),
            "flagged": [{"device_key": d.device_key, "host": d.host, "status": str(d.status),
                         "since": _time(d.since),
                         "walls": {w: _round(j.deviation_pct) for w, j in d.walls.items() if j.status in FLAGGED}}
                        for d in self.flagged],
            "nodes": [n.as_dict() for n in self.nodes if n.status in FLAGGED],
            "fleet_shifts": [s.as_dict() for s in self.fleet_shifts],
        }

    def as_dict(self) -> dict:
        o = self.options
        return {
            "night": self.night.as_dict(),
            "options": {"suite": o.suite, "min_devices": o.min_devices, "warn": o.warn_pct, "drain": o.drain_pct,
                        "spread_nights": o.spread_nights, "history_nights": o.history_nights},
            "counts": {str(s): self.count(s) for s in FleetStatus},
            "devices": [d.as_dict() for d in self.devices],
            "nodes": [n.as_dict() for n in self.nodes],
            "fleet_shifts": [s.as_dict() for s in self.fleet_shifts],
            "models": [m.as_dict() for m in self.models],
            "missing_devices": list(self.missing_devices),
        }
