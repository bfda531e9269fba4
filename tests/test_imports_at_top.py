"""Imports at the top of the module (docs/development.md, "House rules"): an import made inside a
function is allowed for the heavy or optional modules (HEAVY), or with a comment on its line or just
above it saying why (a real import cycle, a cost every other caller would pay). An AST scan of the
code outside tests.

The others are counted and held at or under CEILING (a ratchet: lower it when a sweep moves some
to the top; never raise it). In the packages already swept (SWEPT) each one left says why.
"""
from __future__ import annotations

import ast
import functools
import io
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("suite", "runners", "db", "reports", "rooflab", "scripts")
# heavy or optional: loaded only by the functions that need them
HEAVY = frozenset({"torch", "cupy", "cupyx", "triton", "nvbench", "cuda", "matplotlib", "seaborn", "pyarrow",
                   "psycopg", "pynvml"})
SWEPT = PACKAGES
# 365 before; 260 once reports/, db/ and rooflab/ were swept; 247 with runners/cli's epilogue; 242 with the
# fleet (runners/cluster/nightly.py and run_options.py import at the top); 28 once runners/, suite/ and
# scripts/ were swept (the CLI loads a command's module only when it runs: runners/cli/app.py)
CEILING = 28


@dataclass(frozen=True)
class InnerImport:
    """One import statement made inside a function (a method, a nested function)."""

    path: str  # relative to the root
    line: int
    module: str  # the module imported (`from x.y import z`: x.y)
    says_why: bool  # a comment on its lines, or on the line just above its block of imports


def _comment_lines(source: str) -> set[int]:
    return {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT}


def _imports_in_functions(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Each import statement that lies inside a function, once."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                found.append(child)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


def _module_of(node: ast.Import | ast.ImportFrom) -> str:
    return node.names[0].name if isinstance(node, ast.Import) else "." * node.level + (node.module or "")


@functools.cache
def _inner_imports_of(path: Path, rel: str) -> tuple[InnerImport, ...]:
    source = path.read_text()
    tree = ast.parse(source)
    found = [node for node in _imports_in_functions(tree) if _module_of(node).split(".")[0] not in HEAVY]
    if not found:
        return ()
    lines, comments = source.splitlines(), _comment_lines(source)
    import_lines = {n for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                    for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    out = []
    for node in found:
        above = node.lineno - 1
        while above in import_lines:  # the block of imports it belongs to
            above -= 1
        own = any(n in comments for n in range(node.lineno, (node.end_lineno or node.lineno) + 1))
        says_why = own or (above >= 1 and lines[above - 1].lstrip().startswith("#"))
        out.append(InnerImport(rel, node.lineno, _module_of(node), says_why))
    return tuple(out)


def inner_imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[InnerImport]:
    """Every import made inside a function under `packages` of `root`, but those of HEAVY modules."""
    return [found for package in packages for path in sorted((root / package).rglob("*.py"))
            for found in _inner_imports_of(path, str(path.relative_to(root)))]


def _summary(found: list[InnerImport]) -> str:
    by_package = Counter(f.path.split("/")[0] for f in found)
    unsaid = Counter(f.path.split("/")[0] for f in found if not f.says_why)
    rows = [f"  {p:<8} {by_package[p]:>4} ({unsaid[p]} without a comment)" for p in PACKAGES]
    return (f"imports inside functions, other than of the heavy or optional modules ({', '.join(sorted(HEAVY))}): "
            f"{len(found)} (ceiling {CEILING})\n" + "\n".join(rows))


def test_imports_inside_functions_stay_at_or_under_the_ceiling():
    found = inner_imports(ROOT)
    print(_summary(found))
    assert len(found) <= CEILING, _summary(found)


def test_each_import_left_inside_a_function_of_a_swept_package_says_why():
    unsaid = [f"{f.path}:{f.line} {f.module}" for f in inner_imports(ROOT, SWEPT) if not f.says_why]
    assert unsaid == []


def test_a_planted_inner_import_is_counted_and_a_reason_is_read(tmp_path):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "a.py").write_text(
        "import json\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import pandas\n"
        "def f():\n"
        "    import re\n"  # 6: no reason given
        "    import torch\n"  # heavy: allowed
        "    from cupyx.scipy import fft\n"  # heavy: allowed
        "    # a cycle: b imports this module\n"
        "    from suite.b import g\n"  # 10: the comment above says why
        "    from suite.c import h\n"  # 11: in the same block
        "    x = 1\n"
        "    from suite.d import k  # here: its import costs 0.4 s\n"  # 13: on its line
        "    def inner():\n"
        "        from . import e\n"  # 15: counted once
        "class C:\n"
        "    import os\n"  # a class body, not a function
        "    def m(self):\n"
        "        import csv\n"  # 19
        "\n"
        "        import gzip\n"  # 21: a blank line between: no reason
    )
    found = inner_imports(tmp_path, ("suite",))
    assert [(f.line, f.module, f.says_why) for f in found] == [
        (6, "re", False), (10, "suite.b", True), (11, "suite.c", True), (13, "suite.d", True), (15, ".", False),
        (19, "csv", False), (21, "gzip", False)]
