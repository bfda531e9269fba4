"""A simulated fleet: the health cases on every device, night after night (for the fleet's tests,
its power benchmark and the scale benchmark).

Each device has, per wall, a small stable offset of its own (silicon, cooling, its slot) and moves
from night to night around it; each case adds a little noise of its own, and the whole fleet moves a
little together each night (the site's temperature, a busy filesystem). The spreads are percents of
speed per wall (`NOISE`); `noise_scale` multiplies them all. Planted faults make a device slower on one
wall from a night on (`Slowdown`), or every device slower at once (`FleetStep`: a driver or library
change). The figures are H100-like medians (`BASE_MS`); nothing here is a measurement.

    frame = simulate(SimFleet(nodes=8, gpus_per_node=8, nights=30,
                              slowdowns=(Slowdown(device=5, wall="hbm_rw", pct=5.0, from_night=25),)))

`frame` has the columns of reports/fleet/deviations.py `FLEET_COLUMNS` (and `measured_at`), one
row per night, device and case; night 0 is the oldest, its runs one per node a few minutes apart.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from rooflab.reports.fleet.walls import wall_of
from rooflab.suite.case import Case
from rooflab.suite.spec import expand, load_spec

H100_NAME = "NVIDIA H100 80GB HBM3"
H100_MEMORY = 85_520_809_984
START = datetime(2026, 3, 1, 1, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Noise:
    """Spreads of one wall, in percent of speed (standard deviations)."""

    offset_pct: float  # a device's stable offset from the fleet
    night_pct: float  # a device's wall, night to night
    case_pct: float  # one case of one device, night to night
    fleet_pct: float  # the whole fleet, night to night
    ci_pct: float  # the 95 % CI half-width each result reports


NOISE = {
    "hbm_rw": Noise(0.3, 0.3, 0.15, 0.2, 0.2),
    "matrix": Noise(0.6, 0.5, 0.3, 0.3, 0.3),
    "elementary": Noise(0.4, 0.3, 0.2, 0.2, 0.2),
    "launch": Noise(0.6, 0.5, 0.3, 0.3, 0.5),
    "interconnect": Noise(0.5, 0.5, 0.3, 0.3, 0.5),
}
# H100-like medians (ms) of the health cases, by op, dtype and timing mode
BASE_MS = {
    ("stream_copy", "float32", "launch"): 0.358, ("stream_triad", "float32", "launch"): 0.528,
    ("matmul", "bfloat16", "launch"): 1.571, ("matmul", "float8_e4m3fn", "launch"): 0.846,
    ("elementary", "float32", "launch"): 2.45, ("launch", "float32", "launch"): 0.0071,
    ("launch", "float32", "graph"): 0.0012, ("all_reduce", "float32", "launch"): 1.0,
}


@dataclass(frozen=True)
class Slowdown:
    """Device `device` (0-based, node-major) `pct` percent slower on `wall` from night `from_night` on."""

    device: int
    wall: str
    pct: float
    from_night: int = 0


@dataclass(frozen=True)
class FleetStep:
    """Every device `pct` percent slower on `walls` from night `from_night` on."""

    from_night: int
    pct: float
    walls: tuple[str, ...] = ("matrix",)


@dataclass(frozen=True)
class SimFleet:
    nodes: int = 8
    gpus_per_node: int = 8
    nights: int = 60
    seed: int = 0
    noise_scale: float = 1.0
    slowdowns: tuple[Slowdown, ...] = ()
    steps: tuple[FleetStep, ...] = ()
    device_name: str = H100_NAME
    memory_bytes: int = H100_MEMORY
    suite: str = "health"
    cases: tuple[Case, ...] = field(default_factory=lambda: health_cases())

    @property
    def devices(self) -> int:
        return self.nodes * self.gpus_per_node


def health_cases() -> tuple[Case, ...]:
    """The GPU cases of the shipped health spec (suite/specs/health.yaml)."""
    return tuple(expand(load_spec("health"), "cuda"))


def night_start(night: int) -> datetime:
    return START + timedelta(days=night)


def _speed_factors(sim: SimFleet, walls: list[str], rng: np.random.Generator) -> np.ndarray:
    """log speed of every (night, device, case): offsets, night moves, case noise, fleet moves, faults."""
    n, d, c = sim.nights, sim.devices, len(walls)
    s = sim.noise_scale / 100.0
    noise = [NOISE[w] for w in walls]
    wall_ids = sorted(set(walls))
    by_wall = np.array([wall_ids.index(w) for w in walls])
    per_wall = {w: NOISE[w] for w in wall_ids}
    offset = np.stack([rng.normal(0, per_wall[w].offset_pct * s, d) for w in wall_ids], axis=1)  # (d, walls)
    night = np.stack([rng.normal(0, per_wall[w].night_pct * s, (n, d)) for w in wall_ids], axis=2)  # (n, d, walls)
    fleet = np.stack([rng.normal(0, per_wall[w].fleet_pct * s, n) for w in wall_ids], axis=1)  # (n, walls)
    case = rng.normal(0, 1, (n, d, c)) * np.array([x.case_pct * s for x in noise])
    log_speed = offset[None, :, by_wall] + night[:, :, by_wall] + fleet[:, None, by_wall] + case
    for slow in sim.slowdowns:
        hit = np.array([w == slow.wall for w in walls])
        log_speed[slow.from_night:, slow.device, hit] += np.log1p(-slow.pct / 100.0)
    for step in sim.steps:
        hit = np.array([w in step.walls for w in walls])
        log_speed[step.from_night:, :, hit] += np.log1p(-step.pct / 100.0)
    return log_speed


def simulate(sim: SimFleet) -> pd.DataFrame:
    """The fleet's results, one row per night, device and case (see the module doc)."""
    rng = np.random.default_rng(sim.seed)
    walls = [str(wall_of(c.op, c.family, c.cache)) for c in sim.cases]
    base = np.array([BASE_MS[(c.op, c.dtype, c.timing_mode)] for c in sim.cases])
    median = base[None, None, :] * np.exp(-_speed_factors(sim, walls, rng))
    ci = np.array([NOISE[w].ci_pct / 100.0 for w in walls])
    grid = np.meshgrid(np.arange(sim.nights), np.arange(sim.devices), np.arange(len(sim.cases)), indexing="ij")
    nights, devices, cases = (g.ravel() for g in grid)
    node = devices // sim.gpus_per_node
    collective = np.array([c.family == "collective" for c in sim.cases])
    keep = ~collective[cases] | (devices % sim.gpus_per_node == 0)  # a collective is stored with rank 0
    nights, devices, cases, node = nights[keep], devices[keep], cases[keep], node[keep]
    started = [night_start(int(t)) + timedelta(minutes=3 * int(j)) for t, j in zip(nights, node, strict=True)]
    frame = pd.DataFrame({
        "run_id": [f"{sim.suite}-{t:03d}-node{j:02d}" for t, j in zip(nights, node, strict=True)],
        "started_at": started,
        "host": [f"node{j:02d}" for j in node],
        "device_key": [f"GPU-{d // sim.gpus_per_node:02d}{d % sim.gpus_per_node:02d}-sim" for d in devices],
        "device_name": sim.device_name, "memory_bytes": sim.memory_bytes,
        "case_key": [sim.cases[i].case_key for i in cases],
        "op": [sim.cases[i].op for i in cases], "family": [sim.cases[i].family for i in cases],
        "cache": [sim.cases[i].cache for i in cases], "status": "ok",
        "median_ms": median[nights, devices, cases],
        "rel_ci_halfwidth": ci[cases] * rng.uniform(0.5, 1.5, len(cases)),
        "throttled": False, "quality": "good",
    })
    frame["device_uuid"] = frame["device_key"]
    frame["measured_at"] = frame["started_at"]
    return frame


def device_key(sim: SimFleet, device: int) -> str:
    """The key `simulate` gives device `device`."""
    return f"GPU-{device // sim.gpus_per_node:02d}{device % sim.gpus_per_node:02d}-sim"


def up_to(frame: pd.DataFrame, night: int, nights: int) -> pd.DataFrame:
    """The rows of the `nights` nights ending with `night` (what judging that night reads)."""
    first = night_start(max(0, night - nights + 1))
    last = night_start(night + 1)
    return frame[(frame["started_at"] >= first) & (frame["started_at"] < last)]


def export_records(frame: pd.DataFrame, sim: SimFleet) -> list[dict]:
    """`frame` as the records of a rooflab export (db/columns.py EXPORT_COLUMNS and the extra columns
    the fleet reads), so that `rooflab import` (db/importer.py) stores the simulated fleet."""
    from rooflab.suite.ops.registry import get_op

    cases = {c.case_key: c for c in sim.cases}
    work = {}
    for key, case in cases.items():
        op = get_op(case.op)
        params = op.with_defaults(case.params)
        work[key] = (int(op.flops(params, case.dtype)), int(op.bytes(params, case.dtype)), dict(case.params))
    out = []
    for r in frame.itertuples(index=False):
        case = cases[r.case_key]
        flops, nbytes, params = work[r.case_key]
        seconds = r.median_ms / 1e3
        out.append({
            "run_id": r.run_id, "started_at": r.started_at.isoformat(), "host": r.host,
            "device_name": r.device_name, "device_kind": "cuda", "device_fingerprint": "fp-sim-" + str(r.memory_bytes),
            "suite": sim.suite, "case_key": r.case_key, "op": case.op, "family": case.family,
            "backend": case.backend, "dtype": case.dtype, "params": params, "cache": case.cache, "status": r.status,
            "median_ms": r.median_ms, "p10_ms": r.median_ms * 0.99, "p90_ms": r.median_ms * 1.01, "n_samples": 50,
            "flops": flops, "bytes": nbytes, "intensity": flops / nbytes if nbytes else None,
            "tflops": flops / seconds / 1e12, "gbps": nbytes / seconds / 1e9, "torch_version": "2.13.0",
            "cuda_version": "13.0", "driver_version": "580.65", "git_commit": "sim", "error": None,
            "device_uuid": r.device_uuid, "timing_mode": case.timing_mode, "op_version": case.op_version,
            "measured_at": r.measured_at.isoformat(), "rel_ci_halfwidth": r.rel_ci_halfwidth,
            "throttled": bool(r.throttled), "quality": r.quality, "memory_bytes": int(r.memory_bytes),
            "l2_bytes": 52_428_800, "sm_count": 132, "compute_capability": "9.0",
            "ranks": 8 if case.family == "collective" else None,
        })
    return out


def write_export(frame: pd.DataFrame, sim: SimFleet, path: Path) -> Path:
    """The simulated fleet as a JSON Lines export at `path` (for `rooflab import`)."""
    with path.open("w", encoding="utf-8") as fh:
        for record in export_records(frame, sim):
            fh.write(json.dumps(record) + "\n")
    return path
