"""Functions for tests/suite/test_child.py to run in a child process (importable, no heavy imports)."""
from __future__ import annotations

import os
import time


def add(a: int, b: int) -> tuple[int, int]:
    return a + b, os.getpid()


def env(name: str) -> str | None:
    return os.environ.get(name)


def fail(text: str) -> None:
    raise KeyError(text)


class NeedsTwoArgs(Exception):
    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")


def fail_unpicklable() -> None:
    raise NeedsTwoArgs("x", "y")  # rebuilding it from its args alone would fail in the caller


def die(code: int) -> None:
    os._exit(code)


def sleep(seconds: float) -> None:
    time.sleep(seconds)
