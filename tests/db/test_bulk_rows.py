"""Results written together (ResultStore.add_measurements: COPY on PostgreSQL, one batched INSERT
elsewhere) are stored exactly as results written one at a time, and what is there already is skipped."""
from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select

from rooflab.db import models, query
from rooflab.db.bulk_rows import COPY_FROM
from rooflab.db.engine import make_engine
from rooflab.db.store import ResultStore
from rooflab.record import MeasurementRecord
from tests.db.factories import make_case, make_env, make_measurement, make_run
from tests.db.pg import BACKENDS, backend_url


@contextmanager
def two_databases(backend: str, folder: Path) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        (folder / "a").mkdir()
        (folder / "b").mkdir()
        yield (stack.enter_context(backend_url(backend, folder / "a")),
               stack.enter_context(backend_url(backend, folder / "b")))


def _stored(url: str) -> pd.DataFrame:
    """Every result with its raw samples, by its natural key, without the databases' own ids."""
    frame = query.results(url).set_index(["case_key", "cache", "timing_mode", "device_uuid"]).sort_index()
    engine = make_engine(url, write=False)
    with engine.connect() as conn:
        blobs = {key: bytes(blob) for key, blob in conn.execute(
            select(models.Case.case_key, models.Sample.values_f64le)
            .join(models.Measurement, models.Measurement.id == models.Sample.measurement_id)
            .join(models.Case, models.Case.id == models.Measurement.case_id))}
    engine.dispose()
    frame["samples"] = [blobs.get(key[0]) for key in frame.index]
    return frame


_rng = random.Random()
_run, _env = make_run("bulk", rng=_rng), make_env(4)


def _write(url: str, singles: list[MeasurementRecord], batched: list[MeasurementRecord]) -> list[bool]:
    """`singles` one at a time, then `batched` in one call; returns that call's answer."""
    with ResultStore(url) as store:
        store.start_run(_run)
        store.add_environment(_run.run_id, _env)
        for m in singles:
            assert store.add_measurement(m)
        return store.add_measurements(batched)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_is_stored_as_single_writes_are_and_skips_what_is_there(backend: str, tmp_path: Path) -> None:
    rng = random.Random()
    count = COPY_FROM * 2 + rng.randint(1, 40)
    records = [make_measurement(_run, make_case(i), _env, rng=rng, n_samples=rng.randint(10, 30),
                                status="ok" if rng.random() < 0.85 else "failed") for i in range(count)]
    first = sorted(rng.sample(range(count), 7))
    twice = records[first[0]]  # also a second time within the batch
    with two_databases(backend, tmp_path) as (one_by_one, together):
        assert _write(one_by_one, records, []) == []
        answer = _write(together, [records[i] for i in first], [*records, twice])
        assert answer == [i not in first for i in range(count)] + [False]
        a, b = _stored(one_by_one), _stored(together)
    assert len(a) == count
    pd.testing.assert_frame_equal(a, b)
    ok = next(m for m in records if m.status == "ok")
    row = a.loc[(ok.identity.case.case_key, ok.method.cache, ok.method.timing_mode, ok.identity.device_uuid)]
    assert row["median_ms"] == ok.median_ms and row["measured_at"] == ok.identity.measured_at
    assert json.loads(row["throttle_reasons"]) == list(ok.machine.throttle_reasons)
