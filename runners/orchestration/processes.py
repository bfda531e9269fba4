"""Worker processes: how they are started (a fork server that preloads the heavy imports, else
spawn; never a plain fork of a process that touched CUDA), one worker and its pipe, and what an exit
status says. The supervisor runs one per device; rank groups (ranks.py) and peers in a process of
their own start theirs the same way.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext, SpawnContext

from rooflab.runners.orchestration.messages import ToWorker
from rooflab.runners.orchestration.worker import worker_main


def describe_exit(exitcode: int | None) -> str:
    """`signal SIGSEGV (-11)` or `exit code 3`."""
    if exitcode is None:
        return "unknown exit status"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"signal {name} ({exitcode})"
    return f"exit code {exitcode}"


# A fresh worker (or a rank of a group) imports torch, captures the environment and initialises the
# device; one that takes longer has failed to start. Here, not beside the supervisor, so that a rank
# process, which imports runners/orchestration/ranks.py, does not import the database (SQLAlchemy:
# about 0.7 s of CPU per rank) with the supervisor.
WORKER_START_TIMEOUT_S = 300.0

# Modules the fork server imports once, so that a fresh worker starts in a fraction of a second
# instead of importing torch again. Importing them does not initialise CUDA, so every worker still
# initialises its own CUDA context, as a spawned one would.
WORKER_PRELOAD = ("torch", "numpy", "rooflab.runners.orchestration.worker", "rooflab.runners.engine.timing",
                  "rooflab.runners.machine.clocks", "rooflab.runners.machine.environment")


def worker_context() -> ForkServerContext | SpawnContext:
    """`forkserver` with the heavy imports preloaded where the platform has it, else `spawn`.

    Both start workers from a process that never touched CUDA (a plain fork of the supervisor
    would not be safe once the supervisor had)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(WORKER_PRELOAD))
        return ctx
    return multiprocessing.get_context("spawn")


def prestart_worker_server() -> None:
    """Start the fork server now, so its imports overlap with the caller's own work."""
    if worker_context().get_start_method() == "forkserver":
        forkserver.ensure_running()


class WorkerProcess:
    """One spawned worker and the parent's end of its pipe."""

    def __init__(self, torch_device: str) -> None:
        ctx = worker_context()
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=worker_main,
            args=(child_conn, torch_device, os.getpid(), dict(os.environ)),
            name=f"rooflab-worker[{torch_device}]",
            daemon=False,  # a daemonic process may not start children (torch.compile's workers do)
        )
        self.process.start()
        child_conn.close()

    @property
    def sentinel(self) -> int:
        return self.process.sentinel

    def send(self, message: ToWorker) -> None:
        self.conn.send(message)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)
        self.conn.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit; kill it if it does not."""
        try:
            self.conn.send(("stop", None))
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout_s)
        self.kill()

    def exitcode_after_death(self) -> int | None:
        self.process.join(5.0)
        return self.process.exitcode
