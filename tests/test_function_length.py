"""No function of the packages is longer than MAX_LINES: a longer one is split along its steps.

A function's length is counted with `ast` from its `def` line to its last line (end_lineno - lineno
+ 1): its decorators are not counted, its signature, docstring, comments and blank lines inside
it are. A nested function counts on its own and inside the function that holds it.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("suite", "runners", "db", "reports", "rooflab")
MAX_LINES = 80


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function in `source` longer than `limit` lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                out.append((node.name, node.lineno, length))
    return out


def test_no_function_is_longer_than_the_limit() -> None:
    found = [f"{path.relative_to(ROOT).as_posix()}:{line} {name}: {length} lines"
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             for name, line, length in long_functions(path.read_text())]
    assert found == []


def test_the_count_starts_at_def_and_ends_at_the_last_line() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    at_limit = "@decorator\n@another\ndef f():\n" + body  # 80 lines from `def`, 82 with its decorators
    assert long_functions(at_limit) == []
    one_over = "def g(\n    a: int,\n):\n" + body  # the signature's lines count
    assert long_functions(one_over) == [("g", 1, 82)]
    nested = "class C:\n    def h(self):\n" + "".join(f"        y{i} = {i}\n" for i in range(80))
    assert long_functions(nested) == [("h", 2, 81)]
