"""The four package folders install under one namespace, `rooflab.*`, and nothing generic lands in
site-packages."""
from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("suite", "runners", "db", "reports")


def _package_folders() -> set[str]:
    found = {"rooflab"}
    for top in FOLDERS:
        for folder in [ROOT / top, *(ROOT / top).rglob("*")]:
            if folder.is_dir() and (folder / "__init__.py").is_file() and "__pycache__" not in folder.parts:
                found.add("rooflab." + ".".join(folder.relative_to(ROOT).parts))
    return found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _package_folders()
    assert config["package-dir"] == {"rooflab": "rooflab", **{f"rooflab.{top}": top for top in FOLDERS}}


def test_the_checkout_imports_as_rooflab() -> None:
    import rooflab.db.models
    import rooflab.suite.spec

    assert Path(rooflab.suite.spec.__file__).resolve() == ROOT / "suite" / "spec.py"
    assert Path(rooflab.db.models.__file__).resolve() == ROOT / "db" / "models.py"


def test_the_wheel_holds_only_the_rooflab_package(tmp_path: Path) -> None:
    try:
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
             str(ROOT)],
            capture_output=True, text=True, timeout=240,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("building the wheel took over 4 minutes")
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("rooflab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"rooflab"}
    for expected in ("rooflab/suite/specs/quick.yaml", "rooflab/db/migrations/env.py", "rooflab/runners/cli/app.py",
                     "rooflab/reports/pages/templates/index.html", "rooflab/__main__.py"):
        assert expected in names, expected
