"""The library modules of `runners` load without the command-line app (Typer, Rich)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module",
                         ["rooflab.runners.orchestration.session", "rooflab.runners.orchestration.nightly",
                          "rooflab.runners.orchestration.supervisor"])
def test_library_module_does_not_load_the_cli(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "loaded = sorted(m for m in sys.modules if m == 'typer' or m.startswith('typer.') "
        "or m.startswith('rooflab.runners.cli')); "
        "print(','.join(loaded))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"{module} loads {done.stdout.strip()}"


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
