"""`rooflab import` of the peers' files: a folder with a summary, nothing stored twice, a corrupt file
refused with its line and nothing of it written, a recognised file without a result said so, and
every string a file holds shown as text: never Rich markup on the terminal, never HTML in the report."""
from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from tests.runners.peer_import import formats
from tests.runners.peer_import.planting import FIXTURES, fixture, row_line

runner = CliRunner()
REAL = ("nccl_tests_h100_2nodes.txt", "nvbench_v1_gv100.json", "nvbench_2021_gv100.json",
        "babelstream_rtx2060_transcribed.csv")


def _import(db: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["import", *args, "--db", f"sqlite:///{db}"])
    return result.exit_code, result.stdout, result.stderr


def _count(db: Path) -> int:
    """The results stored in the SQLite file `db` (0 when nothing was ever stored there)."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        if not conn.execute("select name from sqlite_master where name = 'measurements'").fetchall():
            return 0
        return int(conn.execute("select count(*) from measurements").fetchone()[0])


def test_a_folder_imports_each_file_once_with_a_summary(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    (folder / "night").mkdir(parents=True)
    for name in REAL:
        shutil.copy(FIXTURES / name, folder / "night" / name.replace(".", "_"))  # names say nothing
    (folder / "README.txt").write_text("what these logs are\n")
    db = tmp_path / "r.db"
    code, out, err = _import(db, str(folder), "--measured-at", "2026-05-01T08:00")
    assert code == 0, err
    assert "5 files read: 4 imported (81 results added, 0 already present), 0 with no result, 1 not recognised" in out
    assert "README.txt: not recognised" in out and "16 ranks" in out and "(--measured-at)" in out
    assert _count(db) == 81
    code, out, _ = _import(db, str(folder), "--measured-at", "2026-06-01T08:00")
    assert code == 0 and "(0 results added, 81 already present)" in out and _count(db) == 81


def test_a_corrupt_file_writes_nothing_of_itself_and_exits_2(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(FIXTURES / "nvbench_v1_gv100.json", folder / "a.json")
    text = fixture("nccl_tests_h100_2nodes.txt")
    line = row_line(text, 1048576)
    (folder / "b.log").write_text("\n".join(text.splitlines()[:line]) + "\n")  # cut after a row: no footer
    db = tmp_path / "r.db"
    code, out, err = _import(db, str(folder))
    assert code == 2
    assert f"b.log: line {line}: the table ends without nccl-tests' footer" in err
    assert "nothing of this file was written" in err and "1 failed" in out
    assert _count(db) == 9  # the nvbench file, all of it; nothing of the cut log


def test_a_named_file_that_stores_nothing_exits_2_with_the_flag_that_helps(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    (tmp_path / "x.txt").write_text("hello\n")
    code, _, err = _import(db, str(tmp_path / "x.txt"))
    assert code == 2 and "not recognised" in err
    code, out, err = _import(db, str(FIXTURES / "rccl_tests_allreduce.jsonl"))
    assert code == 2 and "holds no result" in out and "rccl_tests_allreduce.jsonl: holds no result" in err
    assert "--device-name" in err and _count(db) == 0
    code, out, _ = _import(db, str(FIXTURES / "rccl_tests_allreduce.jsonl"), "--device-name", "AMD Instinct MI300X")
    assert code == 0 and "5 results (5 added" in out and "the file's modification time" in out
    code, _, err = _import(db, str(tmp_path / "missing.log"))
    assert code == 2 and "no such file" in err


def test_every_unrecognised_file_named_on_the_command_line_exits_2_and_the_others_are_imported(
        tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    (tmp_path / "x.txt").write_text("hello\n")
    (tmp_path / "y.csv").write_text("a,b\n1,2\n")
    good = FIXTURES / "nvbench_v1_gv100.json"
    code, out, err = _import(db, str(tmp_path / "x.txt"), str(good), str(tmp_path / "y.csv"))
    assert code == 2
    assert "x.txt: not recognised" in err and "y.csv: not recognised" in err
    assert "3 files read: 1 imported" in out and _count(db) == 9  # the recognised file, all of it


def test_json_summary_names_device_hosts_ranks_and_time(tmp_path: Path) -> None:
    code, out, _ = _import(tmp_path / "r.db", str(FIXTURES / "nccl_tests_h100_2nodes.txt"), "--json")
    assert code == 0
    report = json.loads(out)
    (run,) = report["files"][0]["runs"]
    assert run["device"] == "NVIDIA H100 80GB HBM3" and run["hosts"] == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert run["nodes"] == 2 and run["ranks"] == [16] and run["time_source"] == "modified"
    assert report["summary"]["added"] == 62 and report["files"][0]["tool"] == "nccl-tests"


PLANTED = "[bold red]boom[/] <script>alert(1)</script>"


def _hostile_outputs(folder: Path) -> None:
    """An nccl-tests output whose hosts and GPU name, and an nvbench file whose benchmark, axis and
    state names, carry Rich markup and HTML."""
    folder.mkdir()
    text = formats.all_reduce_test(("[bold]node-a", "<b>node-b</b>")).replace("NVIDIA H100 80GB HBM3",
                                                                              f"GPU {PLANTED}")
    (folder / "n.log").write_text(text)
    document = json.loads(fixture("nvbench_v1_gv100.json"))
    bench = document["benchmarks"][1]
    bench["name"] = f"copy {PLANTED}"
    for state in bench["states"]:
        state["name"] += f" {PLANTED}"
        for axis in state["axis_values"]:
            axis["name"] = f"T{PLANTED}"
    (folder / "v.json").write_text(json.dumps(document))


def test_strings_from_files_are_text_on_the_terminal_and_in_the_report(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _hostile_outputs(folder)
    db = tmp_path / "r.db"
    code, out, err = _import(db, str(folder), "--measured-at", "2026-05-01")
    assert code == 0, err
    assert f"GPU {PLANTED}" in out and "[bold]node-a" in out  # printed as written, not rendered
    result = runner.invoke(app, ["history", "-f", "op=all_reduce", "--db", f"sqlite:///{db}"])
    # the brackets survive (the table wraps the cell): Rich did not read them as markup
    assert result.exit_code == 0 and "GPU [bold" in result.stdout and "red]boom[/" in result.stdout
    report = tmp_path / "site"
    result = runner.invoke(app, ["report", "--out", str(report), "--db", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.stderr
    pages = "".join(p.read_text(encoding="utf-8") for p in report.glob("*.html"))
    assert "<script>alert(1)</script>" not in pages and "&lt;script&gt;alert(1)&lt;/script&gt;" in pages


def test_a_rooflab_export_imports_as_before(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    assert _import(db, str(FIXTURES / "nccl_tests_h100_2nodes.txt"))[0] == 0
    export = tmp_path / "all.csv"
    result = runner.invoke(app, ["export", "-f", "csv", "-o", str(export), "--db", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.stderr
    code, out, _ = _import(tmp_path / "b.db", str(export))
    assert code == 0 and "62 rows, 62 measurements added, 0 already present" in out


@pytest.mark.parametrize("flag", ["--measured-at=yesterday", "--ranks=1"])
def test_bad_options_exit_2(tmp_path: Path, flag: str) -> None:
    code, _, err = _import(tmp_path / "r.db", str(FIXTURES / "nccl_tests_h100_2nodes.txt"), flag)
    assert code == 2 and err


def test_a_named_folder_that_stores_nothing_exits_2_after_the_other_paths(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "x.txt").write_text("busbw looked fine\n")
    (folder / "y.md").write_text("# the run of Tuesday\n")
    db = tmp_path / "r.db"
    code, out, err = _import(db, str(folder), str(FIXTURES / "nvbench_v1_gv100.json"))
    assert code == 2 and f"{folder}: none of its 2 files holds a result rooflab reads" in err
    assert "x.txt: not recognised" in out and _count(db) == 9  # the named file beside it was imported


def test_a_file_whose_figures_its_stored_results_would_not_give_is_refused_whole(tmp_path: Path) -> None:
    rng = random.Random(8)
    sizes = (1 << 26, 1 << 28)
    first, second = (formats.stream_times(n, rng.uniform(900.0, 1600.0)) for n in sizes)
    text = "\n".join(formats.babelstream_run(sizes[0], first) + formats.babelstream_run(sizes[1], second))
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("Copy")][1]
    lines[at] = lines[at - 15]  # the second run's Copy row holds the first run's, as a mix-up of two runs would
    (tmp_path / "s.txt").write_text("\n".join(lines) + "\n")
    code, out, err = _import(tmp_path / "r.db", str(tmp_path / "s.txt"))
    assert code == 2 and _count(tmp_path / "r.db") == 0 and "0 imported" in out
    assert f"s.txt: line {at + 1}: Copy of {sizes[1]} elements: Copy's fastest time printed" in err
    assert "the file is refused" in err and "nothing of this file was written" in err


def test_dry_run_says_what_would_be_stored_and_writes_nothing(tmp_path: Path) -> None:
    text = fixture("nccl_tests_h100_2nodes.txt")
    kept = "\n".join(line for line in text.splitlines()
                     if not re.match(r"^#\s+Rank\s+(\d+)\b", line) or re.match(r"^#\s+Rank\s+([0-2])\b", line))
    (tmp_path / "some_ranks.log").write_text(kept + "\n")
    db = tmp_path / "r.db"
    code, out, err = _import(db, str(tmp_path / "some_ranks.log"), "--dry-run")
    assert code == 0, err
    assert "62 results (--dry-run: nothing written)" in out and not db.exists()
    assert "1 files read: 1 read whole (62 results; --dry-run: nothing written)" in out
    assert "16 ranks, nodes unknown (its device lines name 3 of its ranks, on ztan-mig-235z); 62 cases" in out
    line = next(x for x in out.splitlines() if "largest size:" in x and "inplace=false,n=2147483648" in x)
    assert ": 338.827 GB/s (busbw printed 338.82, rooflab 338.827; algbw printed 180.71, rooflab 180.708)" in line
