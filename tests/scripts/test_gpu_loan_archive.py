"""scripts/gpu_loan_archive.py: the return folder's limits as the device tool applies them, and the
database packed with what its writers committed (the WAL included) while a writer still holds it."""
from __future__ import annotations

import contextlib
import gzip
import os
import sqlite3
from pathlib import Path
from typing import Any

from tests.scripts.load import load_script

archive: Any = load_script("gpu_loan_archive")


def test_the_limits_catch_too_many_files_a_large_one_a_deep_one_and_a_bad_name(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "b" / "ok.txt").write_text("two folders down comes back")
    assert archive.return_folder_problems(folder) == []
    (folder / "a" / "b" / "c").mkdir()
    (folder / "a" / "b" / "c" / "deep.txt").write_text("x")
    (folder / "big.bin").write_bytes(os.urandom(2048))
    (folder / "sp ace.txt").write_text("x")
    for i in range(6):
        (folder / f"f{i}.txt").write_text("x")
    problems = archive.return_folder_problems(folder, max_file_bytes=1024)
    assert any("deep.txt: more than 2 folders down" in p for p in problems)
    assert any(p.startswith("big.bin: 2048 bytes") for p in problems)
    assert any(p.startswith("sp ace.txt: a name") for p in problems)
    assert "10 files, over 8" in problems


def test_the_database_is_packed_with_its_committed_rows_while_a_writer_holds_it(tmp_path: Path) -> None:
    work, folder = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    folder.mkdir()
    db = work / "rooflab.db"
    writer = sqlite3.connect(db)
    writer.execute("pragma journal_mode=wal")
    writer.execute("create table t (v blob)")
    writer.executemany("insert into t values (?)", [(os.urandom(100),) for _ in range(50)])
    writer.commit()
    assert (work / "rooflab.db-wal").stat().st_size > 0  # the rows are still in the WAL only
    packed = archive.pack(work, folder, db)
    writer.close()
    assert packed.database_note is None and packed.left_out == ()
    restored = tmp_path / "restored.db"
    restored.write_bytes(gzip.decompress((folder / "rooflab.db.gz").read_bytes()))
    with contextlib.closing(sqlite3.connect(restored)) as reader:
        assert reader.execute("select count(*) from t").fetchone() == (50,)
    assert {p.name for p in folder.iterdir()} == {"evidence.tar.gz", "rooflab.db.gz"}
    assert archive.return_folder_problems(folder) == []
