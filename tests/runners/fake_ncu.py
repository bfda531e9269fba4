"""A fake `ncu` for the counters tests: it checks the command line rooflab gives it, runs the
profiled child as ncu would (unless told not to), and replays a fixture CSV into --log-file.

The tests install it as an executable named `ncu` (first on PATH, or given with --ncu) and steer it
with environment variables:
  FAKE_NCU_SCRIPT  a JSON list of actions, one per profiled pass, in order (the last one repeats):
                   {"csv": FILE}          replay tests/runners/fixtures/ncu/FILE into --log-file
                   {"reject": [METRIC]}   fail as ncu does on a metric it does not know, if asked for it
                   {"permission": true}   fail as ncu does without permission to read counters
                   {"error": TEXT}        print `==ERROR== TEXT` and exit 1 (a profiler failure)
                   {"run_target": false}  do not run the profiled command
  FAKE_NCU_LOG     a file that gets one JSON line per call: {"argv": [...], "problems": [...]}
  FAKE_NCU_STATE   a file counting the passes made (which action comes next)
  FAKE_NCU_FIXTURES  the folder of the CSV files (default: tests/runners/fixtures/ncu beside this file)
A command line it does not accept is refused with `==ERROR== fake ncu: ...` and exit code 99.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(os.environ.get("FAKE_NCU_FIXTURES", Path(__file__).resolve().parent / "fixtures" / "ncu"))
VERSION = ("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
           "Version 2025.1.1.0 (build 35528883) (public-release)")
WITH_VALUE = {"--target-processes", "--nvtx-include", "--cache-control", "--clock-control", "--metrics", "--page",
              "--print-units", "--log-file"}
FLAGS = {"--nvtx", "--csv"}
EXPECTED = {"--target-processes": "all", "--nvtx-include": "rooflab.counters/", "--clock-control": "none",
            "--page": "raw", "--print-units": "base"}
REQUIRED_METRICS = {"dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "gpu__time_duration.sum",
                    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
                    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
                    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum", "sm__inst_executed_pipe_tensor.sum"}


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


def check(options: dict[str, str], flags: set[str], target: list[str]) -> list[str]:
    problems = [f"{name} {options.get(name)!r}, expected {want!r}" for name, want in EXPECTED.items()
                if options.get(name) != want]
    problems += [f"missing {flag}" for flag in FLAGS - flags]
    if options.get("--cache-control") not in ("all", "none"):
        problems.append(f"--cache-control {options.get('--cache-control')!r}")
    metrics = set(options.get("--metrics", "").split(","))
    problems += [f"metric {m} not asked for" for m in sorted(REQUIRED_METRICS - metrics)]
    if "--log-file" not in options:
        problems.append("no --log-file")
    if len(target) != 4 or target[1:3] != ["-m", "rooflab.runners.counters.child"] or not Path(target[3]).is_file():
        problems.append(f"target is not `python -m rooflab.runners.counters.child REQUEST`: {target}")
    return problems


def next_action() -> dict:
    script = json.loads(os.environ.get("FAKE_NCU_SCRIPT", '[{"csv": "copy_float32.csv"}]'))
    state = Path(os.environ["FAKE_NCU_STATE"])
    done = int(state.read_text()) if state.exists() else 0
    state.write_text(str(done + 1))
    return script[min(done, len(script) - 1)]


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print(VERSION)
        return 0
    options, flags, target, problems = parse(argv)
    problems += check(options, flags, target)
    with open(os.environ["FAKE_NCU_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": argv, "problems": problems}) + "\n")
    if problems:
        print("==ERROR== fake ncu: " + "; ".join(problems))
        return 99
    action = next_action()
    asked = options["--metrics"].split(",")
    if action.get("permission"):
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
              "Counters on the target device 0.")
        return 1
    rejected = [m for m in action.get("reject", []) if m in asked]
    if rejected:
        print(f"==ERROR== Failed to find metric {rejected[0]}")
        return 1
    print("==PROF== Connected to process", os.getpid())
    if action.get("run_target", True):
        subprocess.run(target, check=False)
    if "error" in action:
        print(f"==ERROR== {action['error']}")
        return 1
    report = (FIXTURES / action["csv"]).read_text(encoding="utf-8")
    Path(options["--log-file"]).write_text("==PROF== Disconnected from process\n" + report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
