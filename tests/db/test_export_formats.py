"""`export` writes what `import` reads, for every format and compression; names and folders that
cannot hold the file, and runs that are not there, are refused before anything is written."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.db import query
from rooflab.runners.cli.app import app
from tests.db.test_export_import import populate

runner = CliRunner()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_every_format_and_compression_round_trips(fmt: str, gz: bool, sqlite_url: str, tmp_path: Path) -> None:
    rows = populate(sqlite_url, n_cases=4)
    out = tmp_path / (f"x.{fmt}.gz" if gz else f"x.{fmt}")
    result = runner.invoke(app, ["export", "--format", fmt, "--out", str(out), "--db", sqlite_url])
    assert result.exit_code == 0, result.output
    head = out.read_bytes()[:4]
    assert (head[:2] == b"\x1f\x8b") == gz  # a .gz name is gzip data, any other name is not
    if fmt == "parquet" and not gz:
        assert head == b"PAR1"
    target = f"sqlite:///{tmp_path / 'target.db'}"
    imported = runner.invoke(app, ["import", str(out), "--db", target, "--json"])
    assert imported.exit_code == 0, imported.output
    assert json.loads(imported.output)["measurements_added"] == rows
    source, copy = query.results(sqlite_url), query.results(target)
    assert source.drop(columns=["run_order"]).equals(copy.drop(columns=["run_order"]))
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


@pytest.mark.parametrize(
    "fmt, name, fragment",
    [
        ("csv", "x.parquet", "the name says parquet but --format is csv"),
        ("parquet", "x.csv.gz", "the name says csv but --format is parquet"),
        ("jsonl", "x.csv", "the name says csv but --format is jsonl"),
        ("csv", "x.txt", "must end in .csv or .csv.gz"),
    ],
)
def test_an_out_name_that_contradicts_the_format_is_refused(fmt: str, name: str, fragment: str, sqlite_url: str,
                                                            tmp_path: Path) -> None:
    populate(sqlite_url, n_cases=2)
    result = runner.invoke(app, ["export", "--format", fmt, "--out", str(tmp_path / name), "--db", sqlite_url])
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "Traceback" not in result.output
    assert not (tmp_path / name).exists()


def test_export_of_a_run_that_is_not_there_is_refused_and_names_the_runs(sqlite_url: str, tmp_path: Path) -> None:
    populate(sqlite_url, n_cases=2)
    out = tmp_path / "x.csv"
    for argv in (["--out", str(out)], []):
        result = runner.invoke(app, ["export", "--format", "csv", "--run", "NOPE", "--db", sqlite_url, *argv])
        assert result.exit_code == 2, result.output
        assert "--run NOPE: no such run" in result.output and "night-2" in result.output
        assert "run_id," not in result.stdout  # no header written before the refusal
    assert not out.exists()


def test_export_into_a_folder_that_cannot_hold_it_is_refused(sqlite_url: str, tmp_path: Path) -> None:
    populate(sqlite_url, n_cases=2)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    for out, fragment in ((tmp_path / "missing" / "x.csv", "does not exist"), (a_file / "x.csv", "is not a directory")):
        result = runner.invoke(app, ["export", "--format", "csv", "--out", str(out), "--db", sqlite_url])
        assert result.exit_code == 2, result.output
        assert fragment in result.output and "Traceback" not in result.output


def test_export_from_a_database_that_is_not_there_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    result = runner.invoke(app, ["export", "--format", "csv", "--db", str(missing)])
    assert result.exit_code == 2 and "no rooflab database" in result.output
    assert result.stdout.strip() == "" or "run_id," not in result.stdout
    assert not missing.exists()


def test_gzip_csv_is_gzip(sqlite_url: str, tmp_path: Path) -> None:
    populate(sqlite_url, n_cases=2)
    out = tmp_path / "x.csv.gz"
    assert runner.invoke(app, ["export", "--format", "csv", "--out", str(out), "--db", sqlite_url]).exit_code == 0
    assert gzip.decompress(out.read_bytes()).decode().startswith("run_id,")
