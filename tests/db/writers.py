"""Writer processes for the concurrency tests (importable, so `spawn` can start them)."""
from __future__ import annotations

import multiprocessing
import random
import sys
import time
from typing import Any

from rooflab.db.store import ResultStore
from tests.db.factories import make_case, make_env, make_measurement, make_run

ENDLESS_LIMIT = 100_000


def shard_writer(url: str, run_seed: int, index: int, count: int, per_shard: int, shared: int, result_queue,
                 start: Any) -> None:
    """Write shard `index` of `count`: its own `per_shard` cases, then `shared` cases every shard also writes.
    `start` (a multiprocessing Barrier of the `count` writers) holds it, its imports done, until every
    writer is ready: they open the database, start the run and write at the same moment."""
    run = make_run("concurrent", rng=random.Random(run_seed))
    env = make_env(7)  # one device: the shared cases collide on purpose
    rng = random.Random()
    added = 0
    start.wait(timeout=120)
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


def shard_writers(url: str, run_seed: int, count: int, per_shard: int, shared: int, result_queue: Any) -> None:
    """`count` shard writers at once, each a process forked from this one (spawned by the test, with
    nothing open yet: no thread, no connection), so that the imports are made once and not in each
    writer. Puts ({index: measurements added}, [each writer's exit code]) on `result_queue`."""
    ctx = multiprocessing.get_context("fork")
    added: Any = ctx.Queue()
    start = ctx.Barrier(count)
    writers = [ctx.Process(target=shard_writer, args=(url, run_seed, i, count, per_shard, shared, added, start))
               for i in range(count)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=240)
    exitcodes = [writer.exitcode for writer in writers]
    result_queue.put((dict(added.get(timeout=10) for _ in range(exitcodes.count(0))), exitcodes))


def endless_writer(url: str, run_seed: int) -> None:
    """Write the measurements of cases 0, 1, 2, ... in order, 2 ms of "measuring" apart, until killed
    (the test kills it part way; it stops by itself only after ENDLESS_LIMIT cases)."""
    run = make_run("killed", rng=random.Random(run_seed))
    env = make_env(3)
    rng = random.Random()
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        sys.stdout.flush()
        for i in range(ENDLESS_LIMIT):
            time.sleep(0.002)
            store.add_measurement(make_measurement(run, make_case(i), env, rng=rng, n_samples=200))
