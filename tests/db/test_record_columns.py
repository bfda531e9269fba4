"""The measurement record and what the database derives from it cannot drift apart.

The measurements table, the row the store writes, the export and import columns and their kinds
all come from rooflab/record.py's fields (db/measurement_columns.py); these tests fail when a
column, an export name or a kind stops matching the record.
"""
from __future__ import annotations

import dataclasses
import random
import typing
from datetime import UTC, datetime

import pytest

from rooflab.db import models
from rooflab.db.columns import ALL_COLUMNS, COLUMN_KINDS, EXPORT_COLUMNS, column_sources
from rooflab.db.measurement_columns import (
    DERIVED_COLUMNS,
    measurement_column_names,
    measurement_row,
    record_columns,
)
from rooflab.record import (
    CaseRecord,
    Identity,
    MachineObservation,
    MeasurementRecord,
    Statistics,
    TimingMethod,
    WorkModel,
    column_of,
    record_from_columns,
)

KEYS = {"id", "run_id", "case_id", "environment_id"}


def _stored_leaves(cls: type) -> set[str]:
    out: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not column_of(f).stored:
            continue
        hint = hints[f.name]
        inner = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if dataclasses.is_dataclass(inner[0]):
            out |= _stored_leaves(typing.cast(type, inner[0]))
        else:
            out.add(f.name)
    return out


def test_every_stored_record_field_is_a_column_of_the_table_and_of_the_export():
    leaves = _stored_leaves(MeasurementRecord)
    assert len(leaves) > 30  # the parts were walked (statistics, method, observation, ...)
    table = {c.name for c in models.Measurement.__table__.columns}
    assert table == KEYS | set(measurement_column_names())
    assert leaves | set(DERIVED_COLUMNS) == set(measurement_column_names())
    assert (leaves | {"intensity", "tflops", "gbps"}) <= set(ALL_COLUMNS)
    assert "device_key" not in ALL_COLUMNS  # a storage key, not a result column


def test_every_export_column_comes_from_the_record_a_derivation_or_a_joined_table():
    sources = set(column_sources())
    for name in ALL_COLUMNS:
        assert name in sources or name in measurement_column_names(), name
    assert set(COLUMN_KINDS) == set(ALL_COLUMNS)
    assert ALL_COLUMNS[: len(EXPORT_COLUMNS)] == EXPORT_COLUMNS  # the contract's order comes first
    assert len(set(ALL_COLUMNS)) == len(ALL_COLUMNS)


def test_file_kinds_follow_the_record_annotations():
    expected = {str: "str", int: "int", float: "float", bool: "bool", datetime: "datetime"}
    for column in record_columns():
        assert COLUMN_KINDS[column.name].kind == column.kind
        assert column.kind in (*expected.values(), "list")
    assert COLUMN_KINDS["throttle_reasons"].kind == "list" and COLUMN_KINDS["median_ms"].nullable
    assert not COLUMN_KINDS["n_samples"].nullable  # a result without statistics stores 0 samples


def _random_record(rng: random.Random, *, ok: bool) -> MeasurementRecord:
    case = CaseRecord("copy.v1:eager:float32:cold:launch:n=64", "copy", 1, "pointwise", "eager", "float32", {"n": 64})
    stats = Statistics(median_ms=rng.uniform(1, 2), mean_ms=rng.uniform(1, 2), min_ms=0.9, max_ms=2.5,
                       p10_ms=rng.uniform(0.9, 1), p90_ms=rng.uniform(2, 2.5), iqr_ms=rng.random(),
                       std_ms=rng.random(), n_samples=rng.randint(6, 99), rel_ci_halfwidth=rng.random() / 50)
    return MeasurementRecord(
        identity=Identity(run_id="r", case=case, device_fingerprint="fp", device_uuid=f"GPU-{rng.randint(0, 9)}",
                          shard="0/2", measured_at=datetime.now(UTC)),
        status="ok" if ok else "failed", error=None if ok else "boom",
        method=TimingMethod(cache="cold", timing_mode="launch", clock="cuda_events", stop_reason="converged",
                            first_call_ms=rng.uniform(1, 9), warmup_calls=rng.randint(3, 9), launches_per_sample=1,
                            flush_bytes=rng.randint(1, 1 << 40), sync_method="blocking_kernel",
                            flush_method="read_sweep"),
        stats=stats if ok else None,
        machine=MachineObservation(sm_clock_start_mhz=1980.0, sm_clock_end_mhz=1755.0, sm_clock_max_mhz=1980.0,
                                   throttle_reasons=("sw_power_cap",), throttled=rng.random() < 0.5,
                                   power_w=rng.uniform(300, 700), energy_j=rng.random(), quality="good",
                                   quality_reasons=(), cpu_threads=None),
        work=WorkModel(flops=rng.randint(0, 1 << 50), bytes=rng.randint(1, 1 << 40)),
        samples_ms=(1.0, 2.0),
    )


@pytest.mark.parametrize("ok", [True, False])
def test_a_row_rebuilds_the_record_it_came_from(ok: bool):
    """The row holds every stored field under its own name: rebuilt by name, the record is equal."""
    m = _random_record(random.Random(7 + ok), ok=ok)
    row = measurement_row(m)
    assert set(row) == set(measurement_column_names())
    if not ok:
        assert row["median_ms"] is None and row["n_samples"] == 0 and row["tflops"] is None
    else:
        assert m.median_ms is not None
        assert row["tflops"] == pytest.approx(m.work.flops / (m.median_ms / 1e3) / 1e12)
    stored = {c.name for c in record_columns()}
    values = {name: (tuple(v) if isinstance(v, list) else v) for name, v in row.items() if name in stored}
    identity = {"run_id": "r", "case": m.identity.case, "device_fingerprint": "fp"}
    ci = {} if not ok else {"ci_low_ms": None, "ci_high_ms": None}
    rebuilt = record_from_columns(**values, **identity, **ci, samples_ms=m.samples_ms)
    assert rebuilt == m


def test_a_name_no_part_holds_is_refused():
    with pytest.raises(TypeError, match="no record field is named 'median'"):
        record_from_columns(median=1.0)
