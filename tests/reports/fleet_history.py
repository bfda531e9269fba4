"""A fleet's nights as export files, for the held-out check of series per physical device.

`fleet_rows` makes what a cluster's health nights leave behind: `hosts` nodes of `per_host` GPUs of one
model (one driver: one device fingerprint), `nights` nights of a short health-like set of cases
(HBM copy and triad, a bf16 GEMM, an elementary-function case, the launch floor), each node's night
one run (`night-NN-nodeH`, as a node's `rooflab run` exports it: a run names one host). Each GPU
keeps a stable offset of its own (2 % spread) and moves night to night (`noise`, 1 %); every GPU of
a night moves together by a small fleet-wide factor (0.3 %). A planted slow GPU runs its HBM cases
`slow_factor` times longer from night `slow_from` on. `write_export` writes the rows as `rooflab
export --format csv` writes them (db/export.py's values, the export columns first), so the check goes
through `rooflab import` as a user's files do.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from rooflab.db.columns import ALL_COLUMNS
from rooflab.db.export import csv_value
from rooflab.suite.case import make_case_key

MODEL = "NVIDIA H100 80GB HBM3"
FINGERPRINT = "fleet-h100-550"
FIRST_NIGHT = datetime(2026, 3, 2, 1, 0, tzinfo=UTC)


@dataclass(frozen=True)
class HealthCase:
    op: str
    family: str
    dtype: str
    params: dict[str, int]
    level_ms: float
    flops: float
    nbytes: float
    hbm: bool  # a case of the HBM wall: the planted slow GPU is slower on these
    cache: str = "cold"
    timing_mode: str = "launch"

    @property
    def case_key(self) -> str:
        return make_case_key(self.op, 1, "eager", self.dtype, self.cache, self.timing_mode, self.params)


N_STREAM = 1 << 28  # 1 GiB of float32: over 4x any GPU's L2
HEALTH = (
    HealthCase("stream_copy", "probe", "float32", {"n": N_STREAM}, 0.35, 0.0, 8.0 * N_STREAM, True),
    HealthCase("stream_triad", "probe", "float32", {"n": N_STREAM}, 0.52, 2.0 * N_STREAM, 12.0 * N_STREAM, True),
    HealthCase("matmul", "gemm", "bfloat16", {"m": 8192, "n": 8192, "k": 8192}, 1.6, 2.0 * 8192 ** 3,
               6.0 * 8192 ** 2, False, cache="hot"),
    HealthCase("elementary", "probe", "float32", {"n": 1 << 24}, 0.21, 1.0 * (1 << 24), 8.0 * (1 << 24), False),
    HealthCase("launch", "probe", "float32", {"n": 1}, 0.0042, 0.0, 0.0, False, cache="hot"),
)


@dataclass(frozen=True)
class Fleet:
    """What was planted, to check the verdicts against."""

    rows: list[dict[str, Any]]
    devices: tuple[tuple[str, str], ...]  # (uuid, host) of every GPU
    slow_uuid: str
    slow_host: str
    cases: tuple[HealthCase, ...]


def uuid_of(host: int, gpu: int) -> str:
    return f"GPU-{host:02d}{gpu:02d}a1b2-7c3d-4e5f-8a9b-{host:04d}{gpu:08d}"


def fleet_rows(*, hosts: int = 8, per_host: int = 8, nights: int = 30, cases: tuple[HealthCase, ...] = HEALTH,
               slow: tuple[int, int] = (4, 5), slow_from: int = 27, slow_factor: float = 1.10, noise: float = 0.01,
               seed: int = 0) -> Fleet:
    """The fleet's results rows (export columns and the extras a rooflab export carries); the GPU
    `slow` (host, index) runs its HBM cases `slow_factor` times longer from night `slow_from` on."""
    rng = np.random.default_rng(seed)
    devices = [(uuid_of(h, g), f"node{h}") for h in range(hosts) for g in range(per_host)]
    offsets = 1.0 + 0.02 * rng.standard_normal((len(devices), len(cases)))
    fleet_moves = 1.0 + 0.003 * rng.standard_normal(nights)
    slow_uuid, slow_host = uuid_of(*slow), f"node{slow[0]}"
    rows = []
    for night in range(nights):
        moves = 1.0 + noise * rng.standard_normal((len(devices), len(cases)))
        for d, (uuid, host) in enumerate(devices):
            h = d // per_host
            started = FIRST_NIGHT + timedelta(days=night, minutes=h)
            for c, case in enumerate(cases):
                median = float(case.level_ms * offsets[d, c] * moves[d, c] * fleet_moves[night])
                if uuid == slow_uuid and case.hbm and night >= slow_from:
                    median *= slow_factor
                rows.append(_row(case, median, run_id=f"night-{night:02d}-{host}", started=started, host=host,
                                 uuid=uuid, commit=f"{night:04d}beef"))
    return Fleet(rows, tuple(devices), slow_uuid, slow_host, cases)


def _row(case: HealthCase, median_ms: float, *, run_id: str, started: datetime, host: str, uuid: str,
         commit: str) -> dict[str, Any]:
    seconds = median_ms * 1e-3
    return {
        "run_id": run_id, "started_at": started, "host": host, "device_name": MODEL, "device_kind": "cuda",
        "device_fingerprint": FINGERPRINT, "suite": "health", "case_key": case.case_key, "op": case.op,
        "family": case.family, "backend": "eager", "dtype": case.dtype, "params": json.dumps(case.params),
        "cache": case.cache, "status": "ok", "median_ms": median_ms, "p10_ms": median_ms * 0.99,
        "p90_ms": median_ms * 1.01, "n_samples": 40, "flops": int(case.flops), "bytes": int(case.nbytes),
        "intensity": case.flops / case.nbytes if case.nbytes else None,
        "tflops": case.flops / seconds / 1e12, "gbps": case.nbytes / seconds / 1e9,
        "torch_version": "2.11.0", "cuda_version": "12.8", "driver_version": "550.54", "git_commit": commit,
        "error": None, "device_uuid": uuid, "measured_at": started, "timing_mode": case.timing_mode,
        "stop_reason": "converged", "rel_ci_halfwidth": 0.002, "quality": "good", "throttled": False,
        "flush_method": "write_sweep" if case.cache == "cold" else "none", "pace": "back_to_back",
        "l2_bytes": 50 * 1024 * 1024, "memory_bytes": 80 * 10 ** 9, "sm_count": 132, "compute_capability": "9.0",
    }


def write_export(rows: list[dict[str, Any]], path: Path) -> Path:
    """The rows as `rooflab export --format csv` writes them: ALL_COLUMNS' order, db.export's values."""
    columns = [c for c in ALL_COLUMNS if any(c in r for r in rows[:1])]
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for r in rows:
            writer.writerow([csv_value(r.get(c)) for c in columns])
    return path
