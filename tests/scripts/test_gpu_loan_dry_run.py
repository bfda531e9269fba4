"""The GPU loan's dry run on a CPU: every command line of the CUDA plan accepted by the real CLI and
every filter selecting cases of the CUDA expansion (scripts/gpu_loan_check.py); then the loan call
itself (scripts/gpu-validate.sh) with every CUDA branch taken on fakes of the machine (an
interpreter that records and writes what a line names, nvidia-smi, ncu: tests/scripts/loan_fakes.py):
the steps in order, the return folder packed after each within the device tool's limits, a hung
step stopped, a failing one not stopping the next, a call killed mid-way still returning what
finished, and bad usage refused."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.scripts import loan_fakes
from tests.scripts.load import ROOT, load_script

plan: Any = load_script("gpu_loan_plan")
check: Any = load_script("gpu_loan_check")
archive: Any = load_script("gpu_loan_archive")
SCRIPT = ROOT / "scripts" / "gpu-validate.sh"
RETURNED = {"steps.tsv", "plan.json", "evidence.tar.gz", "rooflab.db.gz"}


def loan_argv(fakes: loan_fakes.Fakes, tmp_path: Path, *args: str) -> list[str]:
    """The loan call with every CUDA branch taken on the fakes, its work and return folders in tmp_path."""
    return ["bash", str(SCRIPT), "--device-kind", "cuda", "--python", str(fakes.python), "--archive",
            str(tmp_path / "out"), *args, str(tmp_path / "work")]


def call(fakes: loan_fakes.Fakes, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(loan_argv(fakes, tmp_path, *args), env=fakes.env(GV_PYTHON=sys.executable, **env),
                          capture_output=True, text=True, timeout=120, check=False)


def start(fakes: loan_fakes.Fakes, tmp_path: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(loan_argv(fakes, tmp_path, *args), env=fakes.env(GV_PYTHON=sys.executable, **env),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def rows(folder: Path) -> dict[str, dict[str, str]]:
    with (folder / "steps.tsv").open() as f:
        return {r["step"]: r for r in csv.DictReader(f, delimiter="\t")}


def python_calls(fakes: loan_fakes.Fakes) -> list[dict]:
    return [json.loads(line) for line in fakes.py_log.read_text().splitlines()]


def members(out: Path) -> set[str]:
    with tarfile.open(out / "evidence.tar.gz") as tar:
        return set(tar.getnames())


@pytest.fixture
def fakes(tmp_path: Path) -> loan_fakes.Fakes:
    return loan_fakes.install(tmp_path / "fakes")


def test_every_command_line_of_the_cuda_plan_is_accepted_by_the_real_cli_and_selects_cases(tmp_path: Path) -> None:
    settings = plan.LoanSettings(work=str(tmp_path / "work"), python=sys.executable, ncu="/opt/fake/ncu")
    steps = plan.loan_plan(settings)
    checks = check.check_plan(steps, settings)
    assert [c for c in checks if not c.accepted] == []
    assert len(checks) == sum(len(s.commands) for s in steps)
    selecting = [c for c in checks if " -m rooflab " in c.line and " -f " in c.line]
    assert len(selecting) == 8 and all(c.selected and c.selected == c.expected_cases for c in selecting)
    (make,) = [c for c in checks if c.line.startswith("make ")]
    assert make.selected and make.selected >= 4  # gpu-marked tests collected from the four files


def test_the_check_refuses_an_unknown_flag_an_empty_filter_a_miscount_and_an_unseen_tool_line() -> None:
    accepted, message, _ = check.parse_rooflab(["crosscheck", "quick", "--peer", "do_bench"])
    assert not accepted and "--peer" in message
    accepted, message, params = check.parse_rooflab(["crosscheck", "quick", "--rounds", "2"])
    assert accepted and message == "crosscheck" and params["rounds"] == 2
    assert not check.parse_rooflab(["run", "quick", "--max-time", "3"])[0]
    too_many = plan.rooflab("crosscheck", "--rounds", "51", spec="quick", filters=("op=copy",))
    assert "--rounds 51" in check.check_rooflab("s", too_many, "").message
    none = plan.rooflab("run", spec="quick", filters=("op=copy", "n=3"), cases=1)
    assert check.check_rooflab("s", none, "").message == "its filters select no case of the CUDA expansion"
    miscounted = plan.rooflab("run", spec="quick", filters=("op=copy", "n=67108864", "benchmark=gpu_pointwise"),
                              cases=3)
    assert "counted 3 cases, the CUDA expansion has 2" in check.check_rooflab("s", miscounted, "").message
    assert not check.check_rooflab("s", plan.rooflab("run", spec="quick", filters=("op=bogus",)), "").accepted
    bad_script = plan.script("scripts/gpu_gap_probe.py", "--jsn", "x.json")
    assert not check.check_script("s", bad_script, "").accepted
    assert not check.check_tool("s", plan.tool("nvidia-smi", "-lgc", "1980"), "").accepted


def test_the_wheels_check_finds_a_missing_package_a_second_version_and_a_wrong_platform(tmp_path: Path) -> None:
    folder = tmp_path / "whl"
    folder.mkdir()
    names = ["sqlalchemy-2.1.9-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
             "alembic-1.20.1-py3-none-any.whl", "mako-1.4.3-py3-none-any.whl", "pydantic-2.14.4-py3-none-any.whl",
             "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
             "annotated_types-0.8.0-py3-none-any.whl", "typing_inspection-0.4.5-py3-none-any.whl",
             "typing_extensions-4.16.0-py3-none-any.whl", "cuda_bench-0.3.0-cp312-cp312-manylinux_2_27_x86_64.whl"]
    for name in names:
        (folder / name).write_bytes(b"")
    assert check.wheel_problems(folder) == []
    (folder / names[-1]).unlink()
    (folder / "pydantic_core-2.41.0-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(b"")
    (folder / "mako-1.4.3-py3-none-any.whl").unlink()
    (folder / "mako-1.4.3-cp311-cp311-macosx_11_0_arm64.whl").write_bytes(b"")
    problems = check.wheel_problems(folder)
    assert "cuda_bench: no wheel" in problems
    assert any(p.startswith("pydantic_core: 2 versions") for p in problems)
    assert any("mako-1.4.3-cp311-cp311-macosx_11_0_arm64.whl: built for cp311" in p for p in problems)
    assert check.wheel_problems(tmp_path / "none") == [f"{tmp_path / 'none'}: no such folder "
                                                        "(scripts/gpu_wheels.py fetches it)"]


def test_the_loan_call_runs_every_cuda_step_on_fakes_and_returns_within_the_limits(
        fakes: loan_fakes.Fakes, tmp_path: Path) -> None:
    done = call(fakes, tmp_path, FAKE_OUTPUT_BYTES="20000", PYTEST_ADDOPTS="-x")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out, work = tmp_path / "out", tmp_path / "work"
    assert done.stdout.index("expected total") < done.stdout.index("== env:")  # the plan first
    table = rows(out)
    assert list(table) == ["setup", *plan.STEP_NAMES] and all(r["status"] == "ok" for r in table.values())
    # what ran is the plan, line for line and in order, and rooflab's own command line takes each
    settings = plan.LoanSettings(work=str(work), python=str(fakes.python), ncu=str(fakes.bin / "ncu"))
    planned = [c.argv(settings.python)[1:] for s in plan.loan_plan(settings) for c in s.commands
               if c.kind in (plan.CommandKind.ROOFLAB, plan.CommandKind.SCRIPT)]
    calls = python_calls(fakes)
    ran = [c["argv"] for c in calls if c["argv"][:2] != ["-m", "pytest"]]
    assert ran == planned
    assert all(check.parse_rooflab(argv[2:])[0] for argv in ran if argv[:2] == ["-m", "rooflab"])
    (pytest_call,) = [c for c in calls if c["argv"][:2] == ["-m", "pytest"]]
    assert pytest_call["argv"][-4:] == list(plan.TEST_GPU_FILES)
    assert pytest_call["pytest_addopts"] == f"-x --junitxml={work}/test-gpu.xml -p no:cacheprovider"
    assert len(fakes.smi_log.read_text().splitlines()) == 4
    # the return folder: four files within the limits; every step's log and outputs in the evidence
    assert {p.name for p in out.iterdir()} == RETURNED
    assert archive.return_folder_problems(out) == []
    names = members(out)
    assert {f"work/logs/{s}.log" for s in plan.STEP_NAMES} <= names
    for step in plan.loan_plan(settings):
        for output in step.outputs:
            assert any(n == f"work/{output}" or n.startswith(f"work/{output}") for n in names), output


def test_a_return_limit_smaller_than_the_evidence_keeps_the_smallest_files_and_the_last_database_under_it(
        fakes: loan_fakes.Fakes, tmp_path: Path) -> None:
    limit = 120_000
    done = call(fakes, tmp_path, "--steps", "env,roofs,export-report", "--archive-max-bytes", str(limit),
                FAKE_OUTPUT_BYTES="50000")
    assert done.returncode == 0, done.stdout[-3000:]
    out = tmp_path / "out"
    assert archive.return_folder_problems(out, max_file_bytes=limit) == []
    assert {p.name for p in out.iterdir()} == RETURNED
    with tarfile.open(out / "evidence.tar.gz") as tar:
        left_out = tar.extractfile("work/LEFT-OUT.txt")
        assert left_out is not None
        text = left_out.read().decode()
        assert "work/logs/env.log" in tar.getnames() and "work/steps.tsv" in tar.getnames()
    assert "results.jsonl.gz\t50000" in text  # the large ones go, named with their size
    assert "the last one under the limit stays" in done.stdout


def test_a_hung_step_is_stopped_killed_after_its_grace_and_the_next_step_runs(
        fakes: loan_fakes.Fakes, tmp_path: Path) -> None:
    # gap-probe's timeout: 56 s - 45 s (export-report's reserve) - 1 s (grace) - 2 s (packing) = 8 s, less set-up
    t0 = time.monotonic()
    done = call(fakes, tmp_path, "--steps", "gap-probe,export-report", "--budget-s", "56", "--kill-grace-s", "1",
                FAKE_PY_HANG="gpu_gap_probe", FAKE_PY_IGNORE_INT="1")
    assert done.returncode == 1
    table = rows(tmp_path / "out")
    timeout_s = float(table["gap-probe"]["timeout_s"])
    assert table["gap-probe"]["status"] == "timeout" and 5 <= timeout_s <= 8
    assert table["gap-probe"]["rc"] == str(-signal.SIGKILL)  # deaf to SIGINT: killed at the end of its grace
    assert timeout_s + 0.5 <= float(table["gap-probe"]["seconds"]) < timeout_s + 4 and time.monotonic() - t0 < 40
    assert table["export-report"]["status"] == "ok"
    hung = next(c["pid"] for c in python_calls(fakes) if "scripts/gpu_gap_probe.py" in c["argv"])
    with pytest.raises(ProcessLookupError):
        os.kill(hung, 0)


def test_a_failing_command_does_not_stop_its_step_nor_the_next(fakes: loan_fakes.Fakes, tmp_path: Path) -> None:
    done = call(fakes, tmp_path, "--steps", "env,breakdown", FAKE_PY_FAIL="gpu_versions")
    assert done.returncode == 1
    table = rows(tmp_path / "out")
    assert table["env"]["status"] == "failed" and table["env"]["rc"] == "7" and table["env"]["commands"] == "5/5"
    assert "planted failure" in table["env"]["note"] and table["breakdown"]["status"] == "ok"


def wait_for(predicate: Any, seconds: float = 30.0) -> None:
    until = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < until, "timed out waiting"
        time.sleep(0.05)


def gap_probe_started(fakes: loan_fakes.Fakes) -> int | None:
    if not fakes.py_log.exists():
        return None
    return next((c["pid"] for c in python_calls(fakes) if "scripts/gpu_gap_probe.py" in c["argv"]), None)


def test_a_call_killed_mid_step_still_returns_the_steps_that_finished(fakes: loan_fakes.Fakes, tmp_path: Path) -> None:
    proc = start(fakes, tmp_path, "--steps", "env,gap-probe,quick", FAKE_PY_HANG="gpu_gap_probe")
    try:
        wait_for(lambda: gap_probe_started(fakes) is not None)
        proc.kill()  # the device call's end: the whole command killed, nothing packed after
        proc.wait()
    finally:
        if (hung := gap_probe_started(fakes)) is not None:
            os.killpg(hung, signal.SIGKILL)  # the step's own process group, which the runner started
    out = tmp_path / "out"
    assert list(rows(out)) == ["setup", "env"] and rows(out)["env"]["status"] == "ok"
    assert {"work/logs/env.log", "work/env/devices.json", "work/env/versions.json"} <= members(out)
    assert archive.return_folder_problems(out) == []


def test_a_call_told_to_stop_ends_its_step_and_marks_the_rest_interrupted(
        fakes: loan_fakes.Fakes, tmp_path: Path) -> None:
    proc = start(fakes, tmp_path, "--steps", "env,gap-probe,quick", FAKE_PY_HANG="gpu_gap_probe")
    wait_for(lambda: gap_probe_started(fakes) is not None)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 1
    table = rows(tmp_path / "out")
    assert table["env"]["status"] == "ok" and table["gap-probe"]["status"] == "failed"  # it died of the SIGINT
    assert table["quick"]["status"] == "interrupted"
    hung = gap_probe_started(fakes)
    assert hung is not None
    with pytest.raises(ProcessLookupError):
        os.kill(hung, 0)


@pytest.mark.parametrize("args, message", [
    (["--steps", "env,bogus"], "unknown step 'bogus'"),
    (["--rounds", "0"], "--rounds 0: at least 1"),
    (["--archive-inside"], "must be apart from the work folder"),
    (["--work-not-empty"], "exists and is not an empty folder"),
])
def test_bad_usage_is_one_message_exit_code_2_and_nothing_written(tmp_path: Path, args: list[str],
                                                                   message: str) -> None:
    work = tmp_path / "work"
    if args == ["--archive-inside"]:
        args = ["--archive", str(work / "out")]
    if args == ["--work-not-empty"]:
        work.mkdir()
        (work / "left.txt").write_text("an earlier loan's")
        args = []
    before = sorted(tmp_path.rglob("*"))
    done = subprocess.run(["bash", str(SCRIPT), *args, str(work)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GV_PYTHON": sys.executable}, check=False)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_without_a_cuda_device_the_call_refuses_and_writes_nothing(fakes: loan_fakes.Fakes, tmp_path: Path) -> None:
    argv = ["bash", str(SCRIPT), "--python", str(fakes.python), "--archive", str(tmp_path / "out"),
            str(tmp_path / "work")]
    done = subprocess.run(argv, env=fakes.env(GV_PYTHON=sys.executable), capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "no CUDA device" in done.stderr
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


def test_the_plan_prints_without_a_gpu_as_text_and_as_json_for_a_replay(tmp_path: Path) -> None:
    env = {**os.environ, "GV_PYTHON": sys.executable}
    text = subprocess.run(["bash", str(SCRIPT), "--plan", str(tmp_path / "w")], capture_output=True, text=True,
                          env=env, timeout=60, check=True).stdout
    assert text.splitlines()[-1].split()[:3] == ["expected", "total", "423"]
    done = subprocess.run(["bash", str(SCRIPT), "--plan-json", "--rounds", "2", "--steps", "quick,like-copy",
                           str(tmp_path / "w")], capture_output=True, text=True, env=env, timeout=60, check=True)
    data = json.loads(done.stdout)
    assert [s["name"] for s in data["steps"]] == ["quick", "like-copy"] and data["rounds"] == 2
    assert data["return"]["files"] == ["steps.tsv", "plan.json", "evidence.tar.gz", "rooflab.db.gz"]
    assert data["return"]["max_files"] == 8 and data["return"]["max_file_bytes"] == 16 << 20
    assert not (tmp_path / "w").exists()  # printing the plan writes nothing
