"""Writer processes for the concurrency tests (importable, so `spawn` can start them)."""
from __future__ import annotations

import random
import sys
import time

from rooflab.db.store import ResultStore
from tests.db.factories import make_case, make_env, make_measurement, make_run


def shard_writer(url: str, run_seed: int, index: int, count: int, per_shard: int, shared: int, result_queue) -> None:
    """Write shard `index` of `count`: its own `per_shard` cases, then `shared` cases every shard also writes."""
    run = make_run("concurrent", rng=random.Random(run_seed))
    env = make_env(7)  # one device: the shared cases collide on purpose
    rng = random.Random()
    added = 0
    with ResultStore(url) as store:
        store.start_run(run, shard=f"{index}/{count}")
        store.add_environment(run.run_id, env)
        cases = [make_case(1000 + index * per_shard + i) for i in range(per_shard)]
        cases += [make_case(i) for i in range(shared)]
        for case in cases:
            m = make_measurement(run, case, env, rng=rng, shard=f"{index}/{count}",
                                 status="ok" if rng.random() < 0.9 else "failed")
            added += store.add_measurement(m)
        store.finish_run(run.run_id, "complete", shard=f"{index}/{count}")
    result_queue.put((index, added))


def endless_writer(url: str, run_seed: int, n_cases: int) -> None:
    """Write `n_cases` measurements, 2 ms of "measuring" apart (the test kills it part way)."""
    run = make_run("killed", rng=random.Random(run_seed))
    env = make_env(3)
    rng = random.Random()
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        sys.stdout.flush()
        for i in range(n_cases):
            time.sleep(0.002)
            store.add_measurement(make_measurement(run, make_case(i), env, rng=rng, n_samples=200))
