"""reports.regressions.database_check.recent_runs: the newest runs that hold each device's newest runs."""
from __future__ import annotations

import numpy as np
import pandas as pd

from rooflab.reports.regressions.database_check import recent_runs


def _layout(nights: int, hosts: int, per_host: int, one_run_a_night: bool) -> tuple[list[str], pd.DataFrame]:
    runs, pairs = [], []
    for night in range(nights):
        for h in range(1 if one_run_a_night else hosts):
            run = f"n{night:03d}" if one_run_a_night else f"n{night:03d}-h{h}"
            runs.append(run)
            for host in (range(hosts) if one_run_a_night else [h]):
                pairs += [(run, f"GPU-{host}-{g}") for g in range(per_host)]
    return runs, pd.DataFrame(pairs, columns=["run_id", "device_key"])


def test_a_run_per_node_reads_as_many_nights_as_one_run_a_night() -> None:
    # at least a night of runs: the newest k < 8 runs of a run-per-node layout hold fewer than every node,
    # and only the devices measured in the newest runs are followed back
    k = int(np.random.default_rng().integers(8, 40))
    slurm_runs, slurm = _layout(60, 8, 8, one_run_a_night=True)
    assert recent_runs(slurm_runs, slurm, k) == slurm_runs[-k:]
    node_runs, per_node = _layout(60, 8, 8, one_run_a_night=False)
    assert recent_runs(node_runs, per_node, k) == node_runs[-8 * k:]  # k nights of 8 runs: k points a GPU
    assert recent_runs(node_runs[:5], per_node, k) == node_runs[:5]  # fewer runs than asked: all of them


def test_a_device_that_stopped_long_ago_does_not_pull_the_whole_history_in() -> None:
    runs, pairs = _layout(60, 2, 2, one_run_a_night=True)
    gone = pd.DataFrame({"run_id": runs[:3], "device_key": "GPU-retired"})
    rare = pd.DataFrame({"run_id": [runs[0], runs[-1]], "device_key": "GPU-rare"})  # 2 runs, one of them newest
    assert recent_runs(runs, pd.concat([pairs, gone]), 10) == runs[-10:]
    assert recent_runs(runs, pd.concat([pairs, rare]), 10) == runs  # a device of the newest runs: all its runs
