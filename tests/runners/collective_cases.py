"""Helpers for the collective tests: small gloo cases with a short, fixed sampling budget, and the
processes the workers' fork server has started (to see that none is left behind)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rooflab.suite.case import Case, split_mode
from rooflab.suite.ops.registry import get_op
from rooflab.suite.timing import TimingSettings

# few samples, no time floor: a case takes tens of milliseconds
FAST = TimingSettings(warmup_ms=0, warmup_calls=2, min_samples=8, max_samples=8, min_time_ms=0, max_time_ms=2000)


def case(op_name: str, *, n: int = 4096, ranks: Any = 2, dtype: str = "float32", backend: str = "gloo",
         timing: TimingSettings = FAST, **params: Any) -> Case:
    """A collective case; `mode="isolated"` among `params` as a spec names it (suite.case.split_mode)."""
    op = get_op(op_name)
    own, mode = split_mode(op.family, op.resolved_params({"n": n, "ranks": ranks, **params}))
    return Case(op=op.name, op_version=op.version, family=op.family, backend=backend, dtype=dtype, cache="hot",
                timing_mode="launch", collective_mode=mode, params=own, timing=timing)


def forkserver_children() -> set[int]:
    """Live processes whose parent is this process's fork server (workers and ranks)."""
    from multiprocessing import forkserver

    server = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if server is None:
        return set()
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == server and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def alive(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


def plugin_env(monkeypatch: Any) -> None:
    monkeypatch.setenv("ROOFLAB_PLUGINS", "tests.runners.planted_collectives")
    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
