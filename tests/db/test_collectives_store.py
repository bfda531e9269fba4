"""A collective result in the database: its world size (`ranks`, a result column: exported and
imported with it) and its group's record (each rank's median, where each rank ran, NCCL's version and
settings: the `collectives` table, carried by `db merge`, removed with its run)."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select

from rooflab.db import models
from rooflab.db.collectives import collective_frame, straggler
from rooflab.db.engine import make_engine
from rooflab.db.export import export
from rooflab.db.importer import import_file
from rooflab.db.merge import merge
from rooflab.db.query import results
from rooflab.db.store import ResultStore
from rooflab.record import CaseRecord, CollectiveRecord
from tests.db.factories import make_env, make_measurement, make_run

CASE = CaseRecord(case_key="all_reduce.v1:nccl:bfloat16:hot:launch:n=1048576,ranks=all,reduce_op=sum",
                  op="all_reduce", op_version=1, family="collective", backend="nccl", dtype="bfloat16",
                  params={"n": 1048576, "ranks": "all", "reduce_op": "sum"})


def _group(rng: random.Random, ranks: int) -> CollectiveRecord:
    medians = tuple(rng.uniform(0.1, 0.2) for _ in range(ranks))
    return CollectiveRecord(ranks=ranks, rank_medians_ms=medians,
                            rank_devices=tuple(f"node{r // 4} cuda:{r % 4} GPU-{rng.getrandbits(32):08x}"
                                               for r in range(ranks)),
                            comm_version="2.21.5", comm_settings={"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"})


def _store(url: str, seed: int) -> tuple[str, CollectiveRecord]:
    rng = random.Random(seed)
    run, env = make_run(f"night-{seed}", rng=rng), make_env(seed)
    group = _group(rng, 8)
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        store.add_measurement(replace(make_measurement(run, CASE, env, rng=rng), collective=group))
        store.finish_run(run.run_id, "complete")
    return run.run_id, group


def test_the_world_size_is_a_result_column_and_the_group_its_own_row(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    run_id, group = _store(url, 1)
    row = results(url, run_id=run_id).iloc[0]
    assert row["ranks"] == 8 and row["family"] == "collective"
    frame = collective_frame(url)
    assert len(frame) == 1
    got = frame.iloc[0]
    assert got["rank_medians_ms"] == pytest.approx(list(group.rank_medians_ms))
    assert got["rank_devices"] == list(group.rank_devices) and got["comm_version"] == "2.21.5"
    assert got["comm_settings"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert (got["slowest_rank"], got["straggler_excess"]) == straggler(group.rank_medians_ms)
    assert collective_frame(url, run_ids=["another"]).empty


def test_straggler_names_the_slowest_rank_against_the_median_of_the_others() -> None:
    assert straggler([1.0, 1.0, 1.5, 1.0]) == (2, pytest.approx(0.5))
    assert straggler([2.0, 1.0, 1.0]) == (0, pytest.approx(1.0))
    assert straggler([1.0]) == (None, None)


def test_export_and_import_carry_the_world_size(tmp_path: Path) -> None:
    url, other = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    run_id, _ = _store(url, 2)
    path = tmp_path / "out.jsonl"
    export(url, "jsonl", path)
    import_file(other, path)
    assert results(other, run_id=run_id).iloc[0]["ranks"] == 8


def test_merge_carries_the_group_once_and_deleting_the_run_takes_it_along(tmp_path: Path) -> None:
    target, source = f"sqlite:///{tmp_path / 't.db'}", tmp_path / "node.db"
    _store(f"sqlite:///{source}", 3)
    merge(target, [str(source)])
    merge(target, [str(source)])  # twice adds nothing
    assert len(collective_frame(target)) == 1 and results(target).iloc[0]["ranks"] == 8
    engine = make_engine(target, write=True)
    try:
        with engine.begin() as conn:
            conn.execute(delete(models.Run))
            assert conn.scalar(select(func.count()).select_from(models.Collective)) == 0
    finally:
        engine.dispose()
