"""db/usable.py: one rule for which results have a figure, answered alike by an SQL query, a pandas
frame and numpy arrays, on random statuses, medians (negative, zero, missing) and throttle flags."""
from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import Boolean, Column, Float, Integer, MetaData, String, Table, create_engine, insert, select

from rooflab.db.usable import figure_mask, usable_mask
from rooflab.vocab import ResultStatus


@pytest.fixture
def rows() -> list[tuple[str, float | None, bool]]:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    statuses = [str(s) for s in ResultStatus]
    medians = [None, 0.0, -rng.uniform(0.1, 5.0), rng.uniform(1e-6, 1e-3), rng.uniform(0.1, 50.0)]
    return [(rng.choice(statuses), rng.choice(medians), rng.random() < 0.3) for _ in range(200)]


def _by_hand(status: str, median: float | None, throttled: bool) -> tuple[bool, bool]:
    has = status == ResultStatus.OK and median is not None and median > 0
    return has, has and not throttled


def test_sql_pandas_and_numpy_keep_the_same_rows(rows: list[tuple[str, float | None, bool]], tmp_path: Path) -> None:
    expected = [_by_hand(*r) for r in rows]
    frame = pd.DataFrame(rows, columns=["status", "median_ms", "throttled"])
    is_ok, median = frame["status"] == ResultStatus.OK, pd.to_numeric(frame["median_ms"])
    assert list(figure_mask(is_ok, median)) == [e[0] for e in expected]
    assert list(usable_mask(is_ok, median, frame["throttled"])) == [e[1] for e in expected]
    medians = np.array([math.nan if m is None else m for _, m, _ in rows])
    arrays = figure_mask(np.array([s == ResultStatus.OK for s, _, _ in rows]), medians)
    assert arrays.tolist() == [e[0] for e in expected]

    engine = create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    table = Table("results", MetaData(), Column("id", Integer, primary_key=True), Column("status", String(16)),
                  Column("median_ms", Float, nullable=True), Column("throttled", Boolean))
    table.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": i, "status": s, "median_ms": m, "throttled": t}
                                     for i, (s, m, t) in enumerate(rows)])
        kept = {i for (i,) in conn.execute(select(table.c.id).where(
            figure_mask(table.c.status == ResultStatus.OK, table.c.median_ms)))}
        usable = {i for (i,) in conn.execute(select(table.c.id).where(
            usable_mask(table.c.status == ResultStatus.OK, table.c.median_ms, table.c.throttled)))}
    engine.dispose()
    assert kept == {i for i, e in enumerate(expected) if e[0]}
    assert usable == {i for i, e in enumerate(expected) if e[1]}
