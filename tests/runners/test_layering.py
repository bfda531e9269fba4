"""The library modules of `runners` load without the command-line app (Typer, Rich), a collective
rank's module without the database, and the cluster (runners/cluster/) is imported by the command line
alone."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _loaded(module: str, packages: tuple[str, ...]) -> list[str]:
    """The modules of `packages` (a package or any module under it) that importing `module` in a
    fresh Python loads."""
    code = (f"import sys, {module}; packages = {packages!r}; "
            "print(','.join(sorted(m for m in sys.modules if any(m == p or m.startswith(p + '.') "
            "for p in packages))))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [m for m in done.stdout.strip().split(",") if m]


@pytest.mark.parametrize("module",
                         ["rooflab.runners.orchestration.session", "rooflab.runners.cluster.nightly",
                          "rooflab.runners.cluster.slurm",
                          "rooflab.runners.orchestration.supervisor"])
def test_library_module_does_not_load_the_cli(module: str) -> None:
    loaded = _loaded(module, ("typer", "rooflab.runners.cli"))
    assert loaded == [], f"{module} loads {','.join(loaded)}"


def test_a_rank_process_imports_no_database() -> None:
    """A rank is forked from the workers' fork server, which preloads torch, not the database: the
    module its target comes from must not import SQLAlchemy or pandas (about 0.7 s of CPU in every
    rank at every group start)."""
    assert _loaded("rooflab.runners.orchestration.ranks", ("sqlalchemy", "pandas")) == []


def test_every_user_error_has_one_base_the_cli_catches() -> None:
    """Each package's error for bad input derives from rooflab.errors.UserError, the one class the
    command line catches and prints (exit code 2)."""
    from rooflab.db.errors import DatabaseInputError, SchemaVersionError
    from rooflab.errors import UserError
    from rooflab.reports.errors import ReportInputError
    from rooflab.runners.errors import UserInputError
    from rooflab.suite.errors import SpecError
    from rooflab.suite.ops.registry import PluginImportError

    for error in (UserInputError, SpecError, DatabaseInputError, SchemaVersionError, ReportInputError,
                  PluginImportError):
        assert issubclass(error, UserError), error


def cluster_importers(runners: Path) -> list[str]:
    """The modules of `runners` outside the cluster and the command line that import the cluster."""
    found = []
    for path in sorted(runners.rglob("*.py")):
        rel = path.relative_to(runners).as_posix()
        if rel.startswith(("cluster/", "cli/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n == "rooflab.runners.cluster" or n.startswith("rooflab.runners.cluster.") for n in names):
                found.append(rel)
    return found


def test_only_the_command_line_imports_the_cluster(tmp_path: Path) -> None:
    assert cluster_importers(REPO / "runners") == []
    for rel, text in (("orchestration/session.py", "def f():\n    from rooflab.runners.cluster import slurm\n"),
                      ("engine/x.py", "import rooflab.runners.cluster.nightly\n"),
                      ("cli/x_cmd.py", "from rooflab.runners.cluster import slurm\n"),
                      ("cluster/y.py", "from rooflab.runners.cluster.sbatch import directives\n")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert cluster_importers(tmp_path) == ["engine/x.py", "orchestration/session.py"]
