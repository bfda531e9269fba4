"""Shared by the cluster tests: fresh databases (SQLite file, PostgreSQL) and synthetic history.

Synthetic results are written through `db.store.ResultStore`, like a runner writes them, with
fresh random samples around a chosen median.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from rooflab.record import CaseRecord, EnvironmentRecord, MeasurementRecord, RunRecord, record_from_columns


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'results.db'}"


def fresh_postgres_url() -> Iterator[str]:
    """A new, empty database on the test server (tests/db/pg.py), dropped afterwards; the test is
    skipped, with the reason, when ROOFLAB_TEST_POSTGRES_URL is not set."""
    from tests.db.pg import POSTGRES_SKIP_REASON, postgres_server_url
    from tests.db.pg import fresh_postgres_url as fresh

    if postgres_server_url() is None:
        pytest.skip(POSTGRES_SKIP_REASON)
    with fresh() as url:
        yield url


@dataclass(frozen=True)
class Device:
    fingerprint: str
    name: str
    uuid: str | None = None
    host: str = "node-a"  # the node it is in: its runs' host

    def record(self) -> EnvironmentRecord:
        info = {"host": self.host}
        if self.uuid:
            info["uuid"] = self.uuid
        return EnvironmentRecord(
            device_fingerprint=self.fingerprint,
            device_name=self.name,
            device_kind="cuda",
            identity={"name": self.name, "memory_bytes": 80 << 30, "driver_major": 550, "cuda_major": 12,
                      "torch": "2.5.0"},
            info=info,
            memory_bytes=80 << 30,
            l2_bytes=50 << 20,
            sm_count=132,
            compute_capability="9.0",
            driver_version="550.54",
            cuda_version="12.4",
            torch_version="2.5.0",
        )


H100 = Device("fp-h100", "NVIDIA H100 80GB HBM3", "GPU-0001")


def case_record(op: str, n: int) -> CaseRecord:
    key = f"{op}.v1:eager:float32:cold:launch:n={n}"
    return CaseRecord(case_key=key, op=op, op_version=1, family="pointwise", backend="eager", dtype="float32",
                      params={"n": n})


def run_record(run_id: str, started_at: datetime, suite: str = "nightly", host: str = "node-a") -> RunRecord:
    spec_text = f"name: {suite}\n"
    import hashlib

    return RunRecord(
        run_id=run_id, suite=suite, spec_text=spec_text, spec_hash=hashlib.sha256(spec_text.encode()).hexdigest(),
        started_at=started_at, host=host, command_line="rooflab run nightly",
    )


def measurement(run_id: str, case: CaseRecord, median_ms: float, rng: np.random.Generator, *,
                device: Device = H100, measured_at: datetime, shard: str | None = None) -> MeasurementRecord:
    """An ok result whose samples scatter 0.3 % around `median_ms`."""
    samples = np.sort(median_ms * (1.0 + 0.003 * rng.standard_normal(41)))
    med = float(np.median(samples))
    q10, q25, q75, q90 = (float(np.quantile(samples, q)) for q in (0.1, 0.25, 0.75, 0.9))
    return record_from_columns(
        run_id=run_id, case=case, device_fingerprint=device.fingerprint, cache="cold", timing_mode="launch",
        status="ok", measured_at=measured_at, device_uuid=device.uuid, shard=shard, clock="cuda_events",
        median_ms=med, mean_ms=float(samples.mean()), min_ms=float(samples[0]), max_ms=float(samples[-1]),
        p10_ms=q10, p90_ms=q90, iqr_ms=q75 - q25, std_ms=float(samples.std(ddof=1)), n_samples=len(samples),
        rel_ci_halfwidth=0.002, stop_reason="converged", warmup_calls=3, flops=case.params["n"],
        bytes=8 * case.params["n"], samples_ms=tuple(float(s) for s in samples),
    )


def write_history(url: str, *, cases: Sequence[CaseRecord], medians_by_run: Sequence[dict[str, float]],
                  start: datetime, seed: int, prefix: str = "night", suite: str = "nightly",
                  device: Device = H100) -> list[str]:
    """One complete run per entry of `medians_by_run` (case_key -> median_ms), a day apart."""
    from rooflab.db.store import ResultStore

    rng = np.random.default_rng(seed)
    run_ids = []
    with ResultStore(url) as store:
        for i, medians in enumerate(medians_by_run):
            run_id = f"{prefix}-{i:03d}"
            started = start + timedelta(days=i)
            store.start_run(run_record(run_id, started, suite, host=device.host))
            store.add_environment(run_id, device.record())
            for case in cases:
                if case.case_key in medians:
                    store.add_measurement(measurement(run_id, case, medians[case.case_key], rng, device=device,
                                                      measured_at=started + timedelta(minutes=5)))
            store.finish_run(run_id, "complete")
            run_ids.append(run_id)
    return run_ids


T0 = datetime(2026, 10, 1, 1, 0, tzinfo=UTC)
