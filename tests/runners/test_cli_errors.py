"""Errors a user meets on the command line: one line, exit code 2, no traceback, nothing created."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from tests.db.test_export_import import populate

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def rooflab(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m rooflab ...` as a user runs it (through `main`, with its exit-code handling)."""
    base = {k: v for k, v in os.environ.items() if k not in ("ROOFLAB_DB", "ROOFLAB_PLUGINS")}
    return subprocess.run(
        [sys.executable, "-m", "rooflab", *args], cwd=REPO, env={**base, **(env or {})},
        capture_output=True, text=True, timeout=120,
    )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'results.db'}"


def one_clear_line(output: str) -> None:
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output


def unwritable_places(tmp_path: Path) -> list[tuple[Path, str]]:
    """Folders a database or an output cannot go in, whoever runs the test (root ignores chmod)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    places = [(tmp_path / "missing", "does not exist"), (a_file, "not a directory")]
    if not IS_ROOT:
        read_only = tmp_path / "read-only"
        read_only.mkdir()
        read_only.chmod(0o555)
        places.append((read_only, "not writable"))
    return places


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--out", "{tmp}/site"],
        ["regressions"],
        ["export", "--format", "csv"],
        ["roofline", "--device", "cpu"],
        ["compare", "--baseline", "a", "--candidate", "b"],
    ],
    ids=lambda argv: argv[0],
)
def test_read_verbs_refuse_a_database_that_is_not_there_and_create_none(argv: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    result = runner.invoke(app, [*args, "--db", str(missing)])
    assert result.exit_code == 2, result.output
    assert "nope.db" in result.output and ("no database" in result.output or "no rooflab database" in result.output)
    one_clear_line(result.output)
    assert not missing.exists()
    assert not (tmp_path / "site").exists()


def test_run_into_a_database_folder_that_cannot_hold_it_exits_2(tmp_path: Path) -> None:
    spec = tmp_path / "ok.yaml"
    spec.write_text("name: ok\nbenchmarks:\n  - name: c\n    op: copy\n    params: {n: 1024}\n")
    for folder, fragment in unwritable_places(tmp_path):
        result = runner.invoke(app, ["run", str(spec), "--db", str(folder / "r.db"), "--device", "cpu", "-q"])
        assert result.exit_code == 2, result.output
        assert fragment in result.output and "r.db" in result.output
        one_clear_line(result.output)


@pytest.mark.parametrize("verb", ["roofline", "report"])
def test_an_out_folder_that_cannot_be_made_exits_2(verb: str, sqlite_url: str, tmp_path: Path) -> None:
    populate(sqlite_url, n_cases=2)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    device = ["--device", "H100"] if verb == "roofline" else []
    for out in (a_file / "x", a_file):
        result = runner.invoke(app, [verb, *device, "--out", str(out), "--db", sqlite_url])
        assert result.exit_code == 2, result.output
        assert "--out" in result.output
        one_clear_line(result.output)


def test_export_into_an_unwritable_folder_exits_2(sqlite_url: str, tmp_path: Path) -> None:
    populate(sqlite_url, n_cases=2)
    for folder, fragment in unwritable_places(tmp_path):
        result = runner.invoke(app, ["export", "--format", "csv", "--out", str(folder / "x.csv"), "--db", sqlite_url])
        assert result.exit_code == 2, result.output
        assert fragment in result.output
        one_clear_line(result.output)


@pytest.mark.parametrize("argv",
                         [["list", "quick"],
                          ["predict", "copy", "--dtype", "float32", "--device", "H100 SXM", "--shape", "n=4096"]])
def test_a_plugin_that_does_not_import_exits_2_with_one_line(argv: list[str], tmp_path: Path) -> None:
    result = rooflab(*argv, "--db", str(tmp_path / "r.db"), env={"ROOFLAB_PLUGINS": "typo"}) if argv[0] == "predict" \
        else rooflab(*argv, env={"ROOFLAB_PLUGINS": "typo"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "ROOFLAB_PLUGINS" in result.stderr and "'typo'" in result.stderr
    one_clear_line(result.stderr)
