"""A plugin (ROOFLAB_PLUGINS=tests.runners.slow_exit) that makes every rank but rank 0 slow to end:
an exit handler sleeps 2 s, so rank 0, the host of the rendezvous store, would be gone before the
others' process groups are torn down, unless the ranks leave in order."""
from __future__ import annotations

import atexit
import os
import time

if os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) != "0":
    atexit.register(time.sleep, 2.0)
