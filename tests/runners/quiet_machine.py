"""A plugin (ROOFLAB_PLUGINS=...,tests.runners.quiet_machine) that shows the worker a quiet machine.

It points the contention monitor's load-average and CPU-steal readers at a file that reads a load of
zero and at a missing /proc/stat (steal unknown, never contended). End-to-end tests of verdicts on a
planted history load it so that the verdict depends on the planted figures and tonight's sleep, not
on how busy the test machine is: under `make test` on a 2-core machine the one-minute load average
is often above the CPU count, every result is then rightly `contended`, and a contended result is
never a regression, only a suspect. That rule is tested where it lives (tests/runners/test_worker.py,
tests/reports/...), with fakes of its own.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from rooflab.runners.machine import contention

_DIR = tempfile.mkdtemp(prefix="rooflab-quiet-")
atexit.register(shutil.rmtree, _DIR, True)
_LOADAVG = os.path.join(_DIR, "loadavg")
with open(_LOADAVG, "w", encoding="ascii") as fh:
    fh.write("0.00 0.00 0.00 1/100 1\n")

contention.LOADAVG = _LOADAVG
contention.PROC_STAT = os.path.join(_DIR, "no-stat")
