"""The fleet's read (db.fleet_query.fleet_results): each result's device host is the one its run's
device row names (a run may span nodes and name one host), else the run's own host."""
from __future__ import annotations

import random
from dataclasses import replace

from rooflab.db.fleet_query import fleet_results
from rooflab.db.store import ResultStore
from tests.db.factories import make_case, make_env, make_measurement, make_run


def test_each_result_takes_its_devices_host_in_its_run_else_the_runs(any_url: str) -> None:
    rng = random.Random()
    envs = [make_env(i) for i in range(5)]
    nodes = {i: f"node{rng.randint(10, 99)}-{i}" for i in range(5)}
    named: dict[tuple[str, str], str] = {}
    with ResultStore(any_url) as store:
        for night in range(3):
            run = replace(make_run(f"night-{night}", day=night, rng=rng), host=f"login-{night}")
            store.start_run(run)
            for i, env in enumerate(envs):
                # the last device names no host; device 1 names one on the last night only
                names_host = i != 4 and (i != 1 or night == 2)
                info = {**env.info, "host": nodes[i]} if names_host else dict(env.info)
                store.add_environment(run.run_id, replace(env, info=info))
                if names_host:
                    named[(run.run_id, str(env.info["uuid"]))] = nodes[i]
            store.add_measurements([make_measurement(run, make_case(c), env, rng=rng)
                                    for env in envs for c in rng.sample(range(20), 6)])
    read = fleet_results(any_url, [f"night-{n}" for n in (2, 0, 1)])
    assert len(read) == 3 * 5 * 6
    expected = [named.get((run, device), f"login-{run[-1]}") for run, device in
                zip(read["run_id"], read["device_uuid"], strict=True)]
    assert read["host"].tolist() == expected
    assert {h for h in expected if h.startswith("login")} and {h for h in expected if h.startswith("node")}
