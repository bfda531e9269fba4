"""Dependencies point one way: the vocabulary and the record at the bottom, then suite and db, then
runners and reports; only the command line (and the nightly job, which puts a night's steps in order
as the command line does) wires reports into runners. An AST scan of every import."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# package -> the rooflab packages (or bottom modules) it may import
ALLOWED = {
    "suite": {"suite", "vocab", "record", "errors"},
    "db": {"db", "vocab", "record", "errors"},
    "runners": {"runners", "suite", "db", "vocab", "record", "errors"},
    "reports": {"reports", "db", "suite", "vocab", "record", "errors"},
}
# modules that wire the packages together on purpose (docs/development.md, "Layout")
WIRING = {
    "runners/cli": "the command line: the one place that wires suite, runners, db and reports together",
    "runners/orchestration/nightly.py":
        "a night's steps in order (run, history check, report), as the CLI calls them",
    "runners/orchestration/slurm_job.py":
        "names the --fail-on choices of the nightly step it writes (reports.regressions.verdicts)",
}


def _rooflab_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return [n for n in names if n == "rooflab" or n.startswith("rooflab.")]


def _wiring(rel: str) -> bool:
    return any(rel == w or rel.startswith(w + "/") for w in WIRING)


def upward_imports(root: Path) -> list[str]:
    """`file imports module` for every import of a package above the importing one under `root`."""
    wrong = []
    for package, allowed in ALLOWED.items():
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            if _wiring(rel):
                continue
            for name in _rooflab_imports(path):
                part = name.split(".")[1] if "." in name else "api"
                if part not in allowed:
                    wrong.append(f"{rel} imports {name}")
    return wrong


def test_each_package_imports_only_what_lies_below_it():
    assert upward_imports(ROOT) == []


def test_the_bottom_modules_import_nothing_above_them():
    assert _rooflab_imports(ROOT / "rooflab" / "vocab.py") == []
    assert _rooflab_imports(ROOT / "rooflab" / "errors.py") == []
    assert set(_rooflab_imports(ROOT / "rooflab" / "record.py")) <= {"rooflab.vocab"}


def test_a_planted_upward_import_is_caught(tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "bad.py").write_text("def f():\n    from rooflab.runners.engine.timing import measure\n")
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "fine.py").write_text("from rooflab.vocab import CacheMode\nimport rooflab\n")
    assert sorted(upward_imports(tmp_path)) == ["db/bad.py imports rooflab.runners.engine.timing",
                                                "suite/fine.py imports rooflab"]
