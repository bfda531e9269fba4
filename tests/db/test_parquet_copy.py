"""A Parquet export from PostgreSQL goes by COPY (db/parquet_copy.py) and holds what the generic
export writes: the same rows, in the same order, with the same values (text with commas, quotes and
line breaks, nulls and empty text, JSON in its one spelling, times to the microsecond)."""
from __future__ import annotations

import queue
import random
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from rooflab.db import parquet_copy
from rooflab.db.errors import DatabaseInputError
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


def _copy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rooflab-export-copy"]


def test_the_copy_read_ahead_in_small_blocks_writes_the_same_file(postgres_url: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    count = _fill(postgres_url, random.Random())
    whole = tmp_path / "whole.parquet"
    assert export(postgres_url, "parquet", whole) == count
    monkeypatch.setattr(parquet_copy, "AHEAD_BYTES", random.randint(50, 400))  # blocks of a row or two
    monkeypatch.setattr(parquet_copy, "AHEAD_BLOCKS", 2)  # the reader waits on the parser most of the time
    small = tmp_path / "small.parquet"
    assert export(postgres_url, "parquet", small) == count
    assert pq.read_table(small).equals(pq.read_table(whole))
    assert _copy_threads() == []


def test_a_run_whose_copy_fails_fails_the_export_and_leaves_no_file(postgres_url: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(postgres_url, random.Random())
    real = parquet_copy.run_query
    calls = iter(range(100))
    # the third run's COPY names a column that is not there: PostgreSQL refuses it in the reading thread
    monkeypatch.setattr(parquet_copy, "run_query",
                        lambda pk: real(pk).replace("m.cache", "m.no_such_column") if next(calls) == 2 else real(pk))
    out = tmp_path / "results.parquet"
    with pytest.raises(psycopg.errors.UndefinedColumn):
        export(postgres_url, "parquet", out)
    assert list(tmp_path.iterdir()) == []  # neither the file nor its partial one
    assert _copy_threads() == []


def test_a_failing_writer_stops_the_reading_thread(postgres_url: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(postgres_url, random.Random())
    monkeypatch.setattr(parquet_copy, "AHEAD_BYTES", 64)
    monkeypatch.setattr(parquet_copy, "AHEAD_BLOCKS", 1)  # the reader is waiting to hand over its next block
    real = parquet_copy._piece
    pieces = iter(range(100))

    def piece(*args: Any, **kwargs: Any) -> Any:
        if next(pieces) == 1:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(parquet_copy, "_piece", piece)
    out = tmp_path / "results.parquet"
    with pytest.raises(DatabaseInputError, match="cannot write: No space left on device"):
        export(postgres_url, "parquet", out)
    assert list(tmp_path.iterdir()) == []
    assert _copy_threads() == []


def test_a_csv_reader_still_waiting_for_blocks_is_released_once_the_export_ends() -> None:
    # Arrow reads the COPY's blocks on a thread of its own: after a failure that thread may still
    # wait for the next block, which the stopped reading thread will never put
    ahead: queue.Queue[parquet_copy.Ahead] = queue.Queue(maxsize=parquet_copy.AHEAD_BLOCKS)
    read: list[bytes] = []
    waiting = threading.Thread(target=lambda: read.extend(parquet_copy._blocks(ahead)), daemon=True)
    waiting.start()
    ahead.put(b"1,2\n")
    waiting.join(0.2)
    assert waiting.is_alive()  # it read a block and waits for the next
    parquet_copy._release(ahead)
    waiting.join(5)
    assert not waiting.is_alive() and read == [b"1,2\n"] and ahead.empty()


def test_blocks_the_reading_thread_left_behind_are_dropped_for_the_end_of_the_run() -> None:
    ahead: queue.Queue[parquet_copy.Ahead] = queue.Queue(maxsize=parquet_copy.AHEAD_BLOCKS)
    for _ in range(random.randint(1, parquet_copy.AHEAD_BLOCKS)):
        ahead.put(b"3,4\n")
    parquet_copy._release(ahead)
    assert list(parquet_copy._blocks(ahead)) == [] and ahead.empty()
