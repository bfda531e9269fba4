"""No public function of the timing engine, the orchestration, the cluster or the database names `Any`
in its signature: a parameter or a return is typed as what it is (a record, a Protocol where several kinds
meet, `object` for a value only passed along or checked). An AST scan of every signature, shown to
catch each form a signature can take.

A function is public when its name has no leading underscore (or is a dunder) and every class
around it is public; a function nested in another is not. A private helper may keep `Any` where it
is honest (a torch profiler's event, a pandas row). A type alias that hides `Any`, defined in the
packages, counts as `Any`.

`python -m tests.test_public_signatures` prints the counts the issue asks for: `Any` in the
annotations of the code outside tests, and in the public signatures of these packages.
"""
from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("runners/engine", "runners/orchestration", "runners/cluster", "db")
PACKAGES = ("suite", "runners", "db", "reports", "rooflab")
TYPE_ALIAS_STATEMENT = getattr(ast, "TypeAlias", ())  # none before Python 3.12


def _names_any(node: ast.AST | None, aliases: frozenset[str]) -> int:
    """How many times `node` (an annotation) names Any, directly or through one of `aliases`."""
    if node is None:
        return 0
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            node = ast.parse(node.value, mode="eval")
        except SyntaxError:
            return 0
    count = 0
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and (n.id == "Any" or n.id in aliases):
            count += 1
        elif isinstance(n, ast.Attribute) and n.attr == "Any":
            count += 1
    return count


def any_aliases(tree: ast.Module, known: frozenset[str] = frozenset()) -> frozenset[str]:
    """The module's type aliases whose value names Any (`Row = dict[str, Any]`), directly, through
    one of its own such aliases (`Rows = list[Row]`) or one of `known` (imported from elsewhere)."""
    values: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None \
                and "TypeAlias" in ast.dump(node.annotation):
            values[node.target.id] = node.value
        elif isinstance(node, TYPE_ALIAS_STATEMENT):  # `type Row = ...` (Python 3.12)
            values[node.name.id] = node.value
    values = {k: v for k, v in values.items() if isinstance(v, (ast.Subscript, ast.BinOp, ast.Name, ast.Attribute))}
    found = set(known)
    while True:
        more = {name for name, value in values.items() if name not in found and _names_any(value, frozenset(found))}
        if not more:
            return frozenset(found - known)
        found |= more


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def public_functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The module's public functions and the public methods of its public classes (nested functions
    and everything inside a private class are private)."""
    def visit(body: list[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
                yield node
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                yield from visit(node.body)
    yield from visit(tree.body)


def signature_any(fn: ast.FunctionDef | ast.AsyncFunctionDef, aliases: frozenset[str]) -> int:
    """How many times the parameters and the return of `fn` name Any."""
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
    return sum(_names_any(p.annotation, aliases) for p in params) + _names_any(fn.returns, aliases)


@cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _project_aliases() -> frozenset[str]:
    """The aliases that name Any anywhere in the packages (by name: an alias imported from another
    module, or made of one, counts too). Only a module with a top-level assignment whose line names
    Any, or an alias found so far, can define one: only those are parsed."""
    texts = {p: p.read_text() for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}
    found: frozenset[str] = frozenset()
    while True:
        names = "|".join(["Any", *sorted(found)])
        # the assignment's line, or one of the indented lines that continue it, names Any or an alias
        candidate = re.compile(rf"^\w+\s*(?::\s*TypeAlias\s*)?=(?:[^\n]*\n[ \t])*[^\n]*\b(?:{names})\b",
                               re.MULTILINE)
        more = found.union(*(any_aliases(_parsed(p), found) for p, text in texts.items() if candidate.search(text)))
        if more == found:
            return found
        found = more


def public_any(source: str, aliases: frozenset[str] = frozenset()) -> list[tuple[str, int, int]]:
    """(function, line, count) of each public function of `source` whose signature names Any."""
    tree = ast.parse(source)
    known = aliases | any_aliases(tree, aliases)
    return [(fn.name, fn.lineno, n) for fn in public_functions(tree) if (n := signature_any(fn, known))]


def checked_files() -> list[Path]:
    return [p for package in CHECKED for p in sorted((ROOT / package).rglob("*.py"))]


def test_no_public_signature_of_the_engine_the_orchestration_the_cluster_or_the_database_names_any() -> None:
    aliases = _project_aliases()
    found = [f"{path.relative_to(ROOT).as_posix()}:{line} {name} ({n} x Any)"
             for path in checked_files() for name, line, n in public_any(path.read_text(), aliases)]
    assert found == []


def test_the_scan_sees_each_form_and_leaves_private_code_alone() -> None:
    source = '''
from typing import Any
import typing
from typing import TypeAlias

Row = dict[str, Any]
Rows: TypeAlias = list[Row]
Plain = dict[str, int]

def param(x: Any) -> None: ...
def returned() -> typing.Any: ...
def nested(x: dict[str, list[Any]]) -> None: ...
def star(*args: Any, **kwargs: Any) -> None: ...
def keyword(*, x: int = 0, y: "Any" = None) -> None: ...
def aliased(row: Row) -> Plain: ...
async def waits(x: Rows) -> None: ...
def clean(x: object, y: Plain) -> int: ...
def _private(x: Any) -> Any: ...
def outer() -> None:
    def inner(x: Any) -> Any: ...
class Public:
    def __init__(self, x: Any) -> None: ...
    def method(self) -> Any: ...
    def _helper(self, x: Any) -> None: ...
class _Private:
    def method(self, x: Any) -> Any: ...
'''
    assert public_any(source) == [("param", 10, 1), ("returned", 11, 1), ("nested", 12, 1), ("star", 13, 2),
                                  ("keyword", 14, 1), ("aliased", 15, 1), ("waits", 16, 1), ("__init__", 22, 1),
                                  ("method", 23, 1)]
    # an alias imported from another module of the packages is known by name
    assert public_any("from rooflab.db.rows import Row\ndef f(r: Row) -> None: ...", frozenset({"Row"})) == [
        ("f", 2, 1)]


def test_the_aliases_are_found_across_the_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the modules that may define an alias naming Any are parsed: an alias over several lines,
    or made of another module's alias, is still found."""
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "rows.py").write_text("from typing import Any, Callable\n\nCall = Callable[\n    [int],\n"
                                             "    Any,\n]\nFine = dict[str, int]\n")
    (tmp_path / "db" / "more.py").write_text("from rooflab.db.rows import Call\n\nCalls = list[Call]\n")
    (tmp_path / "db" / "other.py").write_text("from typing import Any\n\nx = 1\ndef f(a: Any) -> None: ...\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _project_aliases() == {"Call", "Calls"}


def counts() -> dict[str, int]:
    """`Any` in every annotation of the code outside tests, and in the public signatures of CHECKED."""
    in_annotations = 0
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.arg) or isinstance(node, ast.AnnAssign):
                    in_annotations += _names_any(node.annotation, frozenset())
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    in_annotations += _names_any(node.returns, frozenset())
    aliases = _project_aliases()
    public = sum(n for path in checked_files() for _, _, n in public_any(path.read_text(), aliases))
    return {"Any in annotations outside tests": in_annotations,
            f"Any in public signatures of {', '.join(CHECKED)}": public}


if __name__ == "__main__":
    for what, n in counts().items():
        print(f"{what}: {n}")
