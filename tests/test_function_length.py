"""No function of the packages is longer than MAX_LINES: a longer one is split along its steps.

A function's length is counted with `ast` from its `def` line to its last line (end_lineno - lineno
+ 1): its decorators are not counted, its signature, docstring, comments and blank lines inside
it are. A nested function counts on its own and inside the function that holds it.

Alembic's revisions (db/migrations/versions/) are exempt: a released revision is history, not code to
refactor. A database stamped at a revision was made by that revision's text, so the text never changes
once released (0001's `upgrade` is one 110-line function, as it was released); the next revision
changes the schema instead.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("suite", "runners", "db", "reports", "rooflab")
MAX_LINES = 80
# released revisions never change, so the rule cannot ask for a split (the docstring above)
EXEMPT = ("db/migrations/versions/",)


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function in `source` longer than `limit` lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                out.append((node.name, node.lineno, length))
    return out


def checked_files(root: Path) -> list[Path]:
    """The packages' modules under `root` that the rule holds: all but the released revisions."""
    return [path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))
            if not path.relative_to(root).as_posix().startswith(EXEMPT)]


def test_no_function_is_longer_than_the_limit() -> None:
    found = [f"{path.relative_to(ROOT).as_posix()}:{line} {name}: {length} lines"
             for path in checked_files(ROOT) for name, line, length in long_functions(path.read_text())]
    assert found == []


def test_only_the_migration_revisions_are_exempt(tmp_path: Path) -> None:
    """A long function is found in every package module, the migrations' env.py included, and left
    alone only in a revision; the released 0001 is the long one the exemption is for."""
    long_body = "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    places = ["db/migrations/versions/0099_x.py", "db/migrations/env.py", "db/store.py", "runners/cli/x.py",
              "reports/migrations/versions/x.py"]
    for rel in places:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(long_body)
    checked = {p.relative_to(tmp_path).as_posix() for p in checked_files(tmp_path)}
    assert checked == set(places) - {"db/migrations/versions/0099_x.py"}
    assert [name for name, _, _ in long_functions((ROOT / "db/migrations/versions/0001_initial.py").read_text())] \
        == ["upgrade"]


def test_the_count_starts_at_def_and_ends_at_the_last_line() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    at_limit = "@decorator\n@another\ndef f():\n" + body  # 80 lines from `def`, 82 with its decorators
    assert long_functions(at_limit) == []
    one_over = "def g(\n    a: int,\n):\n" + body  # the signature's lines count
    assert long_functions(one_over) == [("g", 1, 82)]
    nested = "class C:\n    def h(self):\n" + "".join(f"        y{i} = {i}\n" for i in range(80))
    assert long_functions(nested) == [("h", 2, 81)]
