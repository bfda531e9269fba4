"""The gate of the planted_gate op (tests/runners/planted_ops.py), shared by the op and the tests
that hold a run inside a chosen case: the folder named by $ROOFLAB_TEST_GATE, where the case of n
elements writes `waiting-<n>` and waits for `open-<n>` or `open`. No op is registered by importing
this module (planted_ops registers its ops when imported)."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

GATE_ENV = "ROOFLAB_TEST_GATE"
GATE_LIMIT_S = 300.0  # a call waits at most this long, then raises


def wait_for_file(path: Path, proc: subprocess.Popen[str], timeout_s: float = 240.0) -> None:
    """Wait until `path` exists (a gate's `waiting-<n>`: that case is in flight) while `proc` runs."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, f"the run ended before {path.name} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout_s} s"
        time.sleep(0.02)
