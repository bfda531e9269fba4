"""The output folders of the command line (runners/cli/common.py): check_output_dir checks without
creating, output_dir checks and creates; both refuse with one message and exit code 2."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer

from rooflab.runners.cli.common import check_output_dir, output_dir


def _refusal(fn, path: Path, capsys) -> str:
    with pytest.raises(typer.Exit) as exit_:
        fn(path, "--out")
    assert exit_.value.exit_code == 2
    return " ".join(capsys.readouterr().err.split())


def test_a_folder_to_be_made_is_checked_and_only_output_dir_makes_it(tmp_path: Path) -> None:
    new = tmp_path / "a" / "b"
    assert check_output_dir(new) == new and not (tmp_path / "a").exists()
    assert output_dir(new) == new and new.is_dir()
    assert check_output_dir(new) == new  # an existing, writable folder


@pytest.mark.parametrize("fn", [check_output_dir, output_dir])
def test_a_file_in_its_place_or_above_it_is_refused_and_nothing_is_made(fn, tmp_path: Path, capsys) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("x")
    assert "--out:" in (msg := _refusal(fn, a_file, capsys)) and "exists and is not a directory" in msg
    msg = _refusal(fn, a_file / "below", capsys)
    assert "cannot create the directory" in msg and "is not a directory" in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize("fn", [check_output_dir, output_dir])
def test_a_place_that_is_not_writable_is_refused(fn, tmp_path: Path, capsys, monkeypatch) -> None:
    # this machine's tests run as root, which writes anywhere: the permission is planted
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != locked and real(path, mode))
    assert "is not writable" in _refusal(fn, locked, capsys)
    assert "is not writable" in _refusal(fn, locked / "new", capsys)
    assert not (locked / "new").exists()
