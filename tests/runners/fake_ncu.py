"""A fake `ncu` for the counters tests: it checks the command line rooflab gives it, runs the
profiled child as ncu would (unless told not to), and replays a fixture CSV into --log-file.

The tests install it as an executable named `ncu` (first on PATH, or given with --ncu) and steer it
with environment variables:
  FAKE_NCU_SCRIPT  a JSON list of actions, one per profiling pass, in order (the last one repeats):
                   {"csv": FILE}          replay tests/runners/fixtures/ncu/FILE into --log-file
                   {"writeback": FILE}    the write-back pass that follows (the DRAM metrics only, the
                                          caches left alone) replays FILE (default: FILE of "csv" with
                                          _writeback before .csv); {"writeback": {"error": TEXT}} fails it
                   {"reject": [METRIC]}   fail as ncu does on a metric it does not know, if asked for it
                                          (the next pass may then ask for every metric but those)
                   {"permission": true}   fail as ncu does without permission to read counters: when the
                                          profiled process reaches the NVTX range (its result says ok),
                                          as real ncu finds out only at the first kernel it profiles;
                                          a process that never gets there profiles nothing, exit 0
                   {"error": TEXT}        print `==ERROR== TEXT` and exit 1 (a profiler failure)
                   {"run_target": false}  do not run the profiled command
  FAKE_NCU_WARM_PYTHON  the socket of a warm Python (tests/runners/warm_python.py) that starts the
                   profiled command by a fork instead of a fresh interpreter (unset: a fresh one)
  FAKE_NCU_LOG     a file that gets one JSON line per call: {"argv": [...], "problems": [...]}
  FAKE_NCU_STATE   a file holding the passes made (which action comes next) and the metrics rejected
                   by the last one (JSON)
  FAKE_NCU_FIXTURES  the folder of the CSV files (default: tests/runners/fixtures/ncu beside this file)
`install` (imported by a test) sets all this up.
A command line it does not accept is refused with `==ERROR== fake ncu: ...` and exit code 99: among
the checks, that --metrics asks for exactly METRICS (written out here, apart from the code's list in
runners/counters/metrics.py, so that a metric the code stops asking for fails the pass); a write-back
pass (runners/counters/writeback.py) must ask for exactly WRITEBACK_METRICS with --cache-control
none, and hand the child a sweep size.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(os.environ.get("FAKE_NCU_FIXTURES", Path(__file__).resolve().parent / "fixtures" / "ncu"))
VERSION = ("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
           "Version 2025.1.1.0 (build 35528883) (public-release)")
WITH_VALUE = {"--target-processes", "--nvtx-include", "--cache-control", "--clock-control", "--metrics", "--page",
              "--print-units", "--log-file"}
FLAGS = {"--nvtx", "--csv"}
EXPECTED = {"--target-processes": "all", "--nvtx-include": "rooflab.counters/", "--clock-control": "none",
            "--page": "raw", "--print-units": "base"}
# every metric docs/counters.md names, as ncu spells it
METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "gpu__time_duration.sum",
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "sm__inst_executed_pipe_tensor.sum",
    "smsp__inst_executed.sum",
    "smsp__inst_executed_pipe_xu.sum",
)
WRITEBACK_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")  # the write-back pass: these only


def install(folder: Path, monkeypatch: Any) -> Path:
    """This file as an executable `ncu` in folder/bin, first on PATH, its log and state in `folder`
    (calls() reads the log back), the fixtures beside it, and the planted ops as a plugin; returns
    the executable (for --ncu)."""
    bindir = folder / "bin"
    bindir.mkdir()
    exe = bindir / "ncu"
    exe.write_text(f"#!{sys.executable}\n" + Path(__file__).read_text(encoding="utf-8"))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NCU_LOG", str(folder / "ncu-calls.jsonl"))
    monkeypatch.setenv("FAKE_NCU_STATE", str(folder / "ncu-state"))
    monkeypatch.setenv("FAKE_NCU_FIXTURES", str(FIXTURES))
    monkeypatch.setenv("ROOFLAB_PLUGINS", "tests.runners.planted_ops")
    return exe


def calls(folder: Path) -> list[dict]:
    """The command lines the fake installed in `folder` was given, with what it found wrong in each."""
    log = folder / "ncu-calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def parse(argv: list[str]) -> tuple[dict[str, str], set[str], list[str], list[str]]:
    options: dict[str, str] = {}
    flags: set[str] = set()
    problems: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        name = argv[i]
        if name in FLAGS:
            flags.add(name)
            i += 1
        elif name in WITH_VALUE and i + 1 < len(argv):
            options[name] = argv[i + 1]
            i += 2
        else:
            problems.append(f"unknown option {name}")
            i += 1
    return options, flags, argv[i:], problems


def is_writeback(options: dict[str, str]) -> bool:
    """The write-back pass: it asks for the DRAM metrics and nothing else."""
    return sorted(options.get("--metrics", "").split(",")) == sorted(WRITEBACK_METRICS)


def sweep_bytes(target: list[str]) -> object:
    """The sweep size the profiled child was handed (None: a profiling pass; "unreadable": no request)."""
    try:
        request = pickle.loads(Path(target[3]).read_bytes())  # noqa: S301 - written by the test's own rooflab
    except (EOFError, pickle.UnpicklingError):
        return "unreadable"
    return getattr(request, "sweep_bytes", "missing")


def check(options: dict[str, str], flags: set[str], target: list[str], rejected: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with a command line; `rejected`: metrics the last pass refused, which this one
    may leave out."""
    problems = [f"{name} {options.get(name)!r}, expected {want!r}" for name, want in EXPECTED.items()
                if options.get(name) != want]
    problems += [f"missing {flag}" for flag in FLAGS - flags]
    if options.get("--cache-control") not in ("all", "none"):
        problems.append(f"--cache-control {options.get('--cache-control')!r}")
    asked = options.get("--metrics", "").split(",")
    valid_target = len(target) == 4 and Path(target[3]).is_file()
    if is_writeback(options):
        if options.get("--cache-control") != "none":
            problems.append("the write-back pass must leave the caches alone (--cache-control none)")
        size = sweep_bytes(target) if valid_target else None
        if not isinstance(size, int) or size <= 0:
            problems.append(f"the write-back pass's child has no sweep size: {size!r}")
        asked = list(METRICS)  # the metric checks below are the profiling pass's
    elif valid_target and sweep_bytes(target) not in (None, "unreadable"):
        problems.append("a profiling pass's child was given a sweep")
    problems += [f"metric {m} not asked for" for m in METRICS if m not in asked and m not in rejected]
    problems += [f"metric {m!r} is not one rooflab asks for" for m in asked if m not in METRICS]
    problems += [f"metric {m} asked for twice" for m in dict.fromkeys(m for m in asked if asked.count(m) > 1)]
    if "--log-file" not in options:
        problems.append("no --log-file")
    if len(target) != 4 or target[1:3] != ["-m", "rooflab.runners.counters.child"] or not Path(target[3]).is_file():
        problems.append(f"target is not `python -m rooflab.runners.counters.child REQUEST`: {target}")
    return problems


def read_state() -> dict:
    state = Path(os.environ["FAKE_NCU_STATE"])
    return json.loads(state.read_text()) if state.exists() else {"passes": 0, "rejected": []}


def write_state(passes: int, rejected: list[str]) -> None:
    Path(os.environ["FAKE_NCU_STATE"]).write_text(json.dumps({"passes": passes, "rejected": rejected}))


def next_action(state: dict) -> dict:
    script = json.loads(os.environ.get("FAKE_NCU_SCRIPT", '[{"csv": "copy_float32.csv"}]'))
    return script[min(state["passes"], len(script) - 1)]


def reached_range(target: list[str]) -> bool:
    """Whether the profiled child got to its timed call (the NVTX range): its result file says ok."""
    request = pickle.loads(Path(target[3]).read_bytes())  # noqa: S301 - written by the test's own rooflab
    result = Path(request.result_path)
    return result.exists() and json.loads(result.read_text())["status"] == "ok"


def run_target(target: list[str]) -> None:
    """The profiled command, as ncu runs it: in a fresh interpreter, or forked by the warm Python."""
    address = os.environ.get("FAKE_NCU_WARM_PYTHON")
    if not address:
        subprocess.run(target, check=False)
        return
    sys.path.insert(0, str(FIXTURES.parents[3]))  # the checkout (FIXTURES is its tests/runners/fixtures/ncu)
    from tests.runners.warm_python import run

    run(address, target, os.environ, os.getcwd())


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print(VERSION)
        return 0
    state = read_state()
    options, flags, target, problems = parse(argv)
    problems += check(options, flags, target, tuple(state["rejected"]))
    with open(os.environ["FAKE_NCU_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": argv, "problems": problems}) + "\n")
    if problems:
        print("==ERROR== fake ncu: " + "; ".join(problems))
        return 99
    if is_writeback(options):
        return writeback_pass(options, target, next_action({**state, "passes": max(state["passes"] - 1, 0)}))
    action = next_action(state)
    asked = options["--metrics"].split(",")
    rejected = [m for m in action.get("reject", []) if m in asked]
    write_state(state["passes"] + 1, rejected)
    if rejected:
        print(f"==ERROR== Failed to find metric {rejected[0]}")
        return 1
    print("==PROF== Connected to process", os.getpid())
    if action.get("run_target", True):
        run_target(target)
    if action.get("permission"):
        if not action.get("run_target", True) or reached_range(target):
            print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                  "Performance Counters on the target device 0.")
            return 1
        print("==PROF== Disconnected from process\n==WARNING== No kernels were profiled.")
        return 0
    if "error" in action:
        print(f"==ERROR== {action['error']}")
        return 1
    report = (FIXTURES / action["csv"]).read_text(encoding="utf-8")
    Path(options["--log-file"]).write_text("==PROF== Disconnected from process\n" + report, encoding="utf-8")
    return 0


def writeback_pass(options: dict[str, str], target: list[str], action: dict) -> int:
    """The write-back pass of the case the last profiling pass profiled (its action)."""
    print("==PROF== Connected to process", os.getpid())
    run_target(target)
    replay = action.get("writeback", str(action.get("csv", "copy_float32.csv")).replace(".csv", "_writeback.csv"))
    if isinstance(replay, dict):
        print(f"==ERROR== {replay['error']}")
        return 1
    report = (FIXTURES / replay).read_text(encoding="utf-8")
    Path(options["--log-file"]).write_text("==PROF== Disconnected from process\n" + report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
