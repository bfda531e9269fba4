"""Layer profiles and parts: written with their measurement in one transaction, read back, and
removed with it."""
from __future__ import annotations

import dataclasses
import random

from sqlalchemy import create_engine, text

from rooflab.db.layer_query import layer_profiles
from rooflab.db.store import ResultStore
from rooflab.db.urls import normalize_url
from rooflab.record import LayerPartRecord, LayerProfileRecord
from tests.db.factories import make_case, make_env, make_measurement, make_run


def _profile(rng: random.Random) -> LayerProfileRecord:
    parts = tuple(
        LayerPartRecord(position=i, name=name, kind=kind, time_ms=rng.uniform(0.01, 2.0),
                        flops=rng.randint(0, 10**12), bytes=rng.randint(1, 10**10), events=rng.randint(1, 9))
        for i, (name, kind) in enumerate((("norm1", "memory"), ("qkv", "matmul"), ("attention", "attention")))
    )
    return LayerProfileRecord(clock="cuda_kernels", whole_ms=rng.uniform(5, 9), gap_ms=rng.uniform(0, 1),
                              unattributed_ms=rng.uniform(0, 0.1), overlap_ms=0.0, host_ms=rng.uniform(9, 12),
                              events=sum(p.events for p in parts), parts=parts)


def test_a_layer_profile_round_trips_and_goes_with_its_measurement(any_url: str) -> None:
    rng = random.Random()
    run, env = make_run("layer-run"), make_env(0)
    profile = _profile(rng)
    with ResultStore(any_url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        m = dataclasses.replace(make_measurement(run, make_case(0), env, rng=rng), layer_profile=profile)
        assert store.add_measurement(m)
        assert store.add_measurement(make_measurement(run, make_case(1), env, rng=rng))  # no profile
        assert not store.add_measurement(m)  # a duplicate writes nothing, its parts included
    profiles, parts = layer_profiles(any_url)
    assert len(profiles) == 1 and len(parts) == 3
    row = profiles.iloc[0]
    assert row["case_key"] == m.identity.case.case_key and row["median_ms"] == m.median_ms
    assert row["whole_ms"] == profile.whole_ms and row["gap_ms"] == profile.gap_ms and row["clock"] == "cuda_kernels"
    assert list(parts["name"]) == ["norm1", "qkv", "attention"]
    assert list(parts["time_ms"]) == [p.time_ms for p in profile.parts]
    assert list(parts["flops"]) == [p.flops for p in profile.parts]
    engine = create_engine(normalize_url(any_url))
    with engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(text("PRAGMA foreign_keys = ON"))
        conn.execute(text("DELETE FROM measurements"))
    engine.dispose()
    profiles, parts = layer_profiles(any_url)
    assert profiles.empty and parts.empty
