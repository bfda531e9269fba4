"""A `rooflab run` child process for the tests that signal, kill or race runs."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Empty, Queue
from typing import ClassVar

REPO = Path(__file__).resolve().parents[2]
PLUGIN = "tests.runners.planted_ops"


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ROOFLAB_DB"}
    env["ROOFLAB_PLUGINS"] = PLUGIN
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Rooflab:
    """`python -m rooflab run ...` in a child process, its output read line by line. One the test
    left running (it failed before `finish`) is killed after the test (tests/runners/conftest.py), so
    that it neither outlives the test nor turns up later as another test's unclosed pipe."""

    started: ClassVar[list[Rooflab]] = []

    def __init__(self, *args: str) -> None:
        Rooflab.started.append(self)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rooflab", "run", *args],
            cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.lines: list[str] = []
        self._queue: Queue[str] = Queue()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)

    def wait_for(self, text: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.1)
            except Empty:
                if self.proc.poll() is not None and self._queue.empty():
                    break
                continue
            self.lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} not seen; output so far:\n{''.join(self.lines)}")

    def finish(self, timeout_s: float = 120.0) -> tuple[int, str]:
        """Wait for the process, read the rest of its output and close the pipe."""
        code = self.proc.wait(timeout_s)
        self._pump_thread.join(timeout=10)  # the pipe's end: the process and its children are gone
        while not self._queue.empty():
            self.lines.append(self._queue.get())
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code, "".join(self.lines)


    @classmethod
    def end_all(cls) -> None:
        """Kill what is still running and close every pipe."""
        for run in cls.started:
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait(30)
            run._pump_thread.join(timeout=10)
            if run.proc.stdout is not None:
                run.proc.stdout.close()
        cls.started.clear()
