"""`present(value)`: a value a test reads that must be there (not None), asserted, with its type
narrowed for mypy. One line instead of an `assert x is not None` before each use."""
from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None, what: str = "the value") -> T:
    assert value is not None, f"{what} is missing (None)"
    return value
