"""A fake /proc for the contention monitor's scan of runnable threads (tests only)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def fake_proc(root: Path, threads: Mapping[int, Sequence[str]]) -> Path:
    """A /proc of processes `pid -> the states of its threads`, each thread's stat line with a command
    name that holds a space and a parenthesis (as a thread may name itself)."""
    for pid, states in threads.items():
        for i, state in enumerate(states):
            task = root / str(pid) / "task" / str(pid + i)
            task.mkdir(parents=True)
            (task / "stat").write_text(f"{pid + i} (gloo) worker {i}) {state} 1 {pid} {pid} 0 -1 4194368 0\n")
    root.mkdir(parents=True, exist_ok=True)
    return root


def busy_others(root: Path, runnable: int) -> Path:
    """A /proc of `runnable` other processes, each with one running thread (none of them a case's)."""
    return fake_proc(root, {900_000 + 10 * i: ["R"] for i in range(runnable)})
