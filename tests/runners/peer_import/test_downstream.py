"""Imported runs downstream: `rooflab regressions` calls a link that got slower between two imported
nccl-tests runs a regression (and the same link measured again none), `rooflab compare` gives each
collective test's speedup with an interval, and results of two tools are never paired."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rooflab.reports.comparisons.intervals import ratio_alone
from rooflab.reports.comparisons.speedup_table import Standing, _standing
from rooflab.runners.cli.app import app
from tests.runners.peer_import.planting import fixture, slowed

runner = CliRunner()


def _imported(tmp_path: Path, *texts: str) -> tuple[str, list[str]]:
    """A database holding each text imported as one run, a day apart; its URL and run ids."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    runs = []
    for day, text in enumerate(texts, start=1):
        path = tmp_path / f"run{day}.log"
        path.write_text(text)
        result = runner.invoke(app, ["import", str(path), "--db", db, "--json", "--measured-at",
                                     f"2026-03-{day:02d}T06:00"])
        assert result.exit_code == 0, result.stderr
        runs.append(json.loads(result.stdout)["files"][0]["runs"][0]["run_id"])
    return db, runs


def test_a_much_slower_second_run_is_flagged(tmp_path: Path) -> None:
    real = fixture("nccl_tests_h100_2nodes.txt")
    slow = slowed(real, 1.8, ranks=16, from_bytes=1 << 20, jitter=0.02, seed=1)
    db, runs = _imported(tmp_path, real, slow)
    result = runner.invoke(app, ["regressions", "--db", db, "--json"])
    assert result.exit_code == 1  # --fail-on regression (the default)
    flagged = [s for s in json.loads(result.stdout)["series"] if s["status"] == "regression"]
    assert len(flagged) >= 20 and {s["first_bad_run"] for s in flagged} == {runs[1]}
    assert all("two-run check" in s["note"] and s["tool"] == "nccl-tests" for s in flagged)


def test_the_same_link_measured_again_is_no_regression(tmp_path: Path) -> None:
    real = fixture("nccl_tests_h100_2nodes.txt")
    again = slowed(real, 1.0, ranks=16, jitter=0.02, seed=2)
    db, _ = _imported(tmp_path, real, again)
    result = runner.invoke(app, ["regressions", "--db", db, "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["counts"]["regression"] == 0


def test_compare_gives_each_collective_test_an_interval(tmp_path: Path) -> None:
    real = fixture("nccl_tests_h100_2nodes.txt")
    db, runs = _imported(tmp_path, real, slowed(real, 1.5, ranks=16, from_bytes=1 << 20, jitter=0.02, seed=3))
    result = runner.invoke(app, ["compare", "--baseline", runs[0], "--candidate", runs[1], "--db", db, "--json"])
    assert result.exit_code == 0, result.stderr
    tests = json.loads(result.stdout)["collective_tests"]
    assert len(tests) == 2  # the out-of-place and the in-place all_reduce
    for t in tests:
        assert t["standing"] == "slower" and t["low"] < 1 / 1.4 and t["high"] < 1.0 and t["sizes"] >= 10


def test_results_of_two_tools_are_not_paired() -> None:
    side = {"quality": "good", "flush": "none", "pace": "back_to_back"}
    standing, why = _standing(ratio_alone(1.0, 2.0), {**side, "tool": "rooflab"}, {**side, "tool": "nccl-tests"})
    assert standing == Standing.NOT_COMPARABLE and "different tools" in why
    standing, _ = _standing(ratio_alone(1.0, 2.0), {**side, "tool": "nccl-tests"}, {**side, "tool": "nccl-tests"})
    assert standing == Standing.NO_INTERVAL
