"""A Parquet export from PostgreSQL goes by COPY (db/parquet_copy.py) and holds what the generic
export writes: the same rows, in the same order, with the same values (text with commas, quotes and
line breaks, nulls and empty text, JSON in its one spelling, times to the microsecond)."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from rooflab.db.export import _write_parquet, export, iter_records
from rooflab.db.store import ResultStore
from rooflab.record import with_columns
from tests.db.factories import make_case, make_env, make_measurement, make_run

pytestmark = pytest.mark.postgres


def _fill(url: str, rng: random.Random) -> int:
    envs = [make_env(i) for i in range(4)]  # the last: no UUID (a CPU), keyed by its fingerprint
    count = 0
    with ResultStore(url) as store:
        for day in rng.sample(range(40), 4):
            run = make_run(f"night-{day:02d}", day=day, rng=rng)
            store.start_run(run)
            for env in envs:
                store.add_environment(run.run_id, env if env is not envs[-1] else replace(env, info={}))
            records = []
            for env in envs:
                for i in rng.sample(range(30), 12):
                    status = rng.choice(["ok", "ok", "ok", "failed", "skipped"])
                    m = make_measurement(run, make_case(i, cache=rng.choice(["hot", "cold"])), env, rng=rng,
                                         status=status)
                    if status == "failed":
                        m = replace(m, error=f'Traceback, "quoted"\n  line {rng.random()}')
                    elif rng.random() < 0.2:
                        m = with_columns(m, error="", quality_reasons=("noisy", "a, b"))
                    if env is envs[-1]:
                        m = replace(m, identity=replace(m.identity, device_uuid=None))
                    records.append(m)
            count += sum(store.add_measurements(records))
    return count


def test_the_copy_export_is_the_generic_export(postgres_url: str, tmp_path: Path) -> None:
    rng = random.Random()
    count = _fill(postgres_url, rng)
    fast, generic = tmp_path / "fast.parquet", tmp_path / "generic.parquet"
    assert export(postgres_url, "parquet", fast) == count
    assert _write_parquet(iter_records(postgres_url), generic) == count
    a, b = pq.read_table(fast), pq.read_table(generic)
    assert a.num_rows == count and a.schema == b.schema
    assert a.equals(b), next(name for name in a.column_names if not a[name].equals(b[name]))
    one = rng.choice(a.column("run_id").unique().to_pylist())
    mine = a.filter(pc.equal(a.column("run_id"), one))
    assert export(postgres_url, "parquet", tmp_path / "one.parquet", run_id=one) == mine.num_rows > 0
    assert pq.read_table(tmp_path / "one.parquet").equals(mine)
