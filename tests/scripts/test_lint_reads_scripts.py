"""`make lint` checks scripts/ as it checks the packages: ruff reads the folder, and mypy every script,
each as the top-level module it is when run (`python scripts/NAME.py`)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
def test_make_lint_hands_every_script_to_ruff_and_mypy() -> None:
    # -n prints the recipe without running it; -o .venv/.installed: the environment is not rebuilt
    done = subprocess.run(["make", "-n", "-o", ".venv/.installed", "lint"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    ruff = next(line for line in done.stdout.splitlines() if "bin/ruff check" in line)
    mypy = next(line for line in done.stdout.splitlines() if "bin/mypy " in line)
    assert " scripts" in ruff
    assert f"MYPYPATH={ROOT}/scripts" in mypy
    scripts = sorted(p.stem for p in (ROOT / "scripts").glob("*.py"))
    assert scripts and sorted(re.findall(r" -m (\w+)", mypy)) == scripts
