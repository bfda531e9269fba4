"""docs/path-of-a-number.md names file:function per hop; each must exist under that name."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "path-of-a-number.md"
# `runners/engine/stats.py:summarize` or `rooflab/record.py:MeasurementRecord.median_ms`
REF = re.compile(r"`([\w/]+\.py):([A-Za-z_][\w.]*)")


def _defined_names(path: Path) -> set[str]:
    """Top-level names, and members as Class.member or bare (a row may name a method alone)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.update((f"{node.name}.{member.name}", member.name))
                    elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                        names.add(f"{node.name}.{member.target.id}")
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def stale_refs(text: str, root: Path) -> list[str]:
    out = []
    for file, name in REF.findall(text):
        path = root / file
        if not path.is_file():
            out.append(f"{file}:{name} (no such file)")
        elif name not in _defined_names(path):
            out.append(f"{file}:{name} (not defined there)")
    return out


def test_every_file_function_the_doc_names_exists():
    refs = REF.findall(DOC.read_text())
    assert len(refs) >= 15  # one per hop at least: the pattern still matches the table
    assert stale_refs(DOC.read_text(), ROOT) == []


def test_a_renamed_function_is_caught(tmp_path):
    (tmp_path / "m.py").write_text("class A:\n    x: int\n    def f(self):\n        pass\n\ndef g():\n    pass\n")
    text = "`m.py:A.f` `m.py:f` `m.py:A.x` `m.py:g` `m.py:h` `n.py:g` `m.py:A.y`"
    assert stale_refs(text, tmp_path) == ["m.py:h (not defined there)", "n.py:g (no such file)",
                                          "m.py:A.y (not defined there)"]
