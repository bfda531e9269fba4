"""db.record_batch: whole runs of records in one transaction, on SQLite and PostgreSQL: the rows are
those the store writes (samples, the collectives row), loading again adds nothing, and a run that
fails to load leaves nothing of itself behind."""
from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from rooflab.db import models
from rooflab.db.collectives import collective_frame
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import Database
from rooflab.db.record_batch import RecordRun, load_runs
from rooflab.db.series_query import raw_samples
from rooflab.record import (
    CaseRecord,
    CollectiveRecord,
    EnvironmentRecord,
    Identity,
    MeasurementRecord,
    RunRecord,
    Statistics,
    TimingMethod,
    WorkModel,
)
from rooflab.vocab import CacheMode, ResultStatus, Tool

AT = datetime(2026, 2, 3, 4, 5, tzinfo=UTC)


def _run(run_id: str, sizes: list[int], samples: bool = True) -> RecordRun:
    env = EnvironmentRecord(device_fingerprint="fp-h100-nccl", device_name="NVIDIA H100 80GB HBM3", device_kind="cuda",
                            identity={"kind": "cuda", "model": "NVIDIA H100 80GB HBM3", "tool": Tool.NCCL_TESTS},
                            info={"hosts": ["a", "b"]})
    rng = random.Random(run_id)
    measurements = []
    for n in sizes:
        case = CaseRecord(f"all_reduce.v1:nccl:float32:hot:launch:n={n},ranks=2,reduce_op=sum", "all_reduce", 1,
                          "collective", "nccl", "float32", {"n": n, "ranks": 2, "reduce_op": "sum"})
        values = tuple(rng.uniform(0.1, 0.2) for _ in range(7)) if samples else ()
        t = sorted(values)[3] if values else 0.15
        measurements.append(MeasurementRecord(
            identity=Identity(run_id=run_id, case=case, device_fingerprint=env.device_fingerprint,
                              device_uuid="a:0000:06:00", measured_at=AT),
            status=ResultStatus.OK, method=TimingMethod(cache=CacheMode.HOT, tool=Tool.NCCL_TESTS),
            stats=Statistics(median_ms=t, mean_ms=t, min_ms=t, max_ms=t, p10_ms=t, p90_ms=t, iqr_ms=0.0, std_ms=None,
                             n_samples=max(1, len(values))),
            work=WorkModel(bytes=4 * n), samples_ms=values,
            collective=CollectiveRecord(ranks=2, rank_devices=("a cuda:0", "b cuda:0"), comm_version="2.28.7")))
    run = RunRecord(run_id=run_id, suite=Tool.NCCL_TESTS, spec_text="", spec_hash="h" + run_id, started_at=AT,
                    host="a, b", command_line="")
    return RecordRun(run=run, environments=[env], measurements=measurements)


def _count(url: str) -> int:
    with Database(url) as database, database.writer().connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(models.Measurement)) or 0)


def test_runs_load_once_with_samples_and_groups(any_url: str) -> None:
    counts = load_runs(any_url, [_run("r1", [1024, 2048, 4096])])
    assert (counts.runs, counts.measurements, counts.samples, counts.collectives) == (1, 3, 3, 3)
    again = load_runs(any_url, [_run("r1", [1024, 2048, 4096])])
    assert (again.measurements, again.skipped) == (0, 3)
    samples = raw_samples(any_url, run_id=["r1"])
    assert len(samples) == 3 and {len(s) for s in samples["samples_ms"]} == {7}
    groups = collective_frame(any_url, run_ids=["r1"])
    assert list(groups["rank_devices"].iloc[0]) == ["a cuda:0", "b cuda:0"]
    assert groups["comm_version"].iloc[0] == "2.28.7"


def test_a_run_that_fails_to_load_leaves_nothing(any_url: str) -> None:
    good, bad = _run("r2", [1024]), _run("r3", [2048])
    broken = dataclasses.replace(bad.measurements[0], status="fine")  # not a ResultStatus
    bad.measurements = [*bad.measurements, broken]
    with pytest.raises(DatabaseInputError, match="invalid status"):
        load_runs(any_url, [good, bad])
    load_runs(any_url, [_run("r0", [8])])  # the database itself is sound
    assert _count(any_url) == 1
