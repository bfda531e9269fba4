"""The loan's plan checked where there is no GPU, so that a typo never costs the loan: every rooflab
command line parsed by the real command line (its Typer app, each command's body replaced by a
recorder, so nothing runs; an unknown option or a bad value fails), the cross-check's rounds and
peers through rooflab's own checks, every filter against the CUDA expansion of its spec through
the real `rooflab list SPEC --device-kind cuda` (at least one case, and as many as the step's
estimate counted on), every script's command line through its own parse_args, the test-gpu step's
make line through `make -n` and its test files through pytest's collection of the gpu-marked tests,
every nvidia-smi line against those that ran on the H100 (examples/h100/part1/env), and with
--wheels DIR the wheels the call will carry.

    scripts/gpu-validate.sh --check [--wheels .whl] WORK   (make test: tests/scripts/test_gpu_loan_dry_run.py)
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import gpu_loan_plan as plan
import typer.main
from typer.testing import CliRunner

from rooflab.errors import UserError
from rooflab.runners.cli.app import COMMANDS, LazyCommands, app
from rooflab.runners.crosscheck.peers import parse_peers
from rooflab.runners.crosscheck.session import validate_rounds

ROOT = Path(__file__).resolve().parents[1]
# the nvidia-smi lines of the plan, each seen running on the H100 of the first loan
# (examples/h100/part1/env: nvidia-smi.txt, nvidia-smi-q.txt, nvidia-smi-query.csv, nvidia-smi-after.txt)
NVIDIA_SMI_SEEN = (
    (),
    ("-q",),
    ("--query-gpu=name,pci.bus_id,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,"
     "power.draw,power.limit,temperature.gpu", "--format=csv"),
    ("-q", "-d", "CLOCK,PERFORMANCE,POWER,TEMPERATURE"),
)


@dataclass(frozen=True)
class CommandCheck:
    step: str
    line: str  # the command line, as run
    accepted: bool
    message: str = ""  # why not, or what was checked
    selected: int | None = None  # cases of the CUDA expansion its filters select; tests a make line collects
    expected_cases: int | None = None


# ---------------------------------------------------------------- rooflab's own command line


def recording_group() -> tuple[Any, list[dict]]:
    """A fresh click group of rooflab's Typer app whose commands record their parsed options
    instead of running."""
    group = typer.main.get_command(app)
    assert isinstance(group, LazyCommands)
    for name in COMMANDS:  # every command built now (the group builds each on first use)
        group.command(name)
    calls: list[dict] = []

    def patch(command: Any, path: tuple[str, ...]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands is not None:
            for name, sub in subcommands.items():
                patch(sub, (*path, name))
            return

        def record(**params: Any) -> None:
            calls.append({"command": " ".join(path), "params": params})

        command.callback = record

    patch(group, ())
    return group, calls


def parse_rooflab(args: Sequence[str]) -> tuple[bool, str, dict]:
    """Whether rooflab's command line takes `args` (after `python -m rooflab`); the parsed options."""
    group, calls = recording_group()
    try:
        group.main(args=list(args), prog_name="rooflab", standalone_mode=False)
    except Exception as exc:  # noqa: BLE001 - click's usage errors and anything else: refused, with the message
        message = exc.format_message() if hasattr(exc, "format_message") else repr(exc)
        return False, message, {}
    if not calls:
        return False, "no command ran (a group or --help?)", {}
    return True, calls[0]["command"], calls[0]["params"]


def check_crosscheck(params: dict) -> str | None:
    """The rounds and peers through the cross-check's own checks."""
    try:
        validate_rounds(params["rounds"])
        parse_peers(params["peers"])
    except UserError as exc:
        return str(exc)
    return None


@cache
def selected_cases(spec: str, filters: tuple[str, ...]) -> tuple[int | None, str]:
    """How many cases of the spec's CUDA expansion the filters keep, by the real `rooflab list`."""
    args = ["list", spec, "--device-kind", plan.DEVICE, "--json", *(w for f in filters for w in ("-f", f))]
    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        return None, f"rooflab {' '.join(args)}: exit {result.exit_code}: {result.output.strip()[:300]}"
    return int(json.loads(result.stdout)["count"]), ""


def check_rooflab(step: str, command: plan.Command, line: str) -> CommandCheck:
    accepted, message, params = parse_rooflab(command.args)
    if accepted and message == "crosscheck":
        if (why := check_crosscheck(params)) is not None:
            accepted, message = False, why
    if not accepted or command.spec is None:
        return CommandCheck(step, line, accepted, message)
    count, why = selected_cases(command.spec, command.filters)
    if count is None:
        return CommandCheck(step, line, False, why)
    if count == 0:
        return CommandCheck(step, line, False, "its filters select no case of the CUDA expansion", 0,
                            command.expected_cases)
    if command.expected_cases is not None and count != command.expected_cases:
        return CommandCheck(step, line, False, f"the estimate counted {command.expected_cases} cases, the CUDA "
                                               f"expansion has {count}", count, command.expected_cases)
    return CommandCheck(step, line, True, message, count, command.expected_cases)


# ---------------------------------------------------------------- scripts, make, tools


def load_script(path: str) -> Any:
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def check_script(step: str, command: plan.Command, line: str) -> CommandCheck:
    if not (ROOT / command.program).is_file():
        return CommandCheck(step, line, False, f"{command.program} does not exist")
    module = load_script(command.program)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            module.parse_args(list(command.args))
    except SystemExit as exc:
        return CommandCheck(step, line, False, (errors.getvalue().strip() or str(exc)).splitlines()[-1])
    return CommandCheck(step, line, True, "parse_args")


def gpu_tests_collected(files: Sequence[str], python: str = sys.executable) -> tuple[dict[str, int], str]:
    """The gpu-marked tests pytest collects from each file, as `make test-gpu` selects them."""
    with tempfile.TemporaryDirectory() as scratch:
        argv = [python, "-m", "pytest", "-q", "-m", "gpu", "-o", "addopts=-ra", "--collect-only", "-p",
                "no:cacheprovider", f"--junitxml={scratch}/collect.xml", *files]
        # the caller's own pytest options (an outer run's -n, say) would change what is printed
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS" and not k.startswith("PYTEST_XDIST")}
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, check=False, timeout=300)
    counts = dict.fromkeys(files, 0)
    for node in re.findall(r"^(\S+?\.py)::", done.stdout, flags=re.M):
        if node in counts:
            counts[node] += 1
    return counts, "" if done.returncode == 0 else f"pytest exit {done.returncode}: {done.stdout[-300:]}"


def check_make(step: str, command: plan.Command, line: str) -> CommandCheck:
    done = subprocess.run(["make", "-n", *command.args], capture_output=True, text=True, cwd=ROOT, check=False)
    files = next(a for a in command.args if a.startswith("GPU_TESTS=")).removeprefix("GPU_TESTS=").split()
    if done.returncode != 0 or not all(f in done.stdout for f in files):
        return CommandCheck(step, line, False, f"make -n: exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}")
    counts, why = gpu_tests_collected(files)
    empty = [f for f, n in counts.items() if n == 0]
    if why or empty:
        return CommandCheck(step, line, False, why or f"no gpu-marked test collected from {', '.join(empty)}")
    collected = ", ".join(f"{n} from {f}" for f, n in counts.items())
    return CommandCheck(step, line, True, f"make -n; pytest collects {collected}", sum(counts.values()))


def check_tool(step: str, command: plan.Command, line: str) -> CommandCheck:
    if command.program == "nvidia-smi" and command.args in NVIDIA_SMI_SEEN:
        return CommandCheck(step, line, True, "ran on the H100 (examples/h100/part1/env)")
    return CommandCheck(step, line, False, f"{command.program} {' '.join(command.args)}: never seen running on a GPU")


# ---------------------------------------------------------------- the carried wheels

# what the GPU image lacks of rooflab's dependencies (scripts/gpu_wheels.py fetches them):
# SQLAlchemy, Alembic and Mako, Pydantic and its core and types, and nvbench's cuda-bench
WHEELS_NEEDED = ("sqlalchemy", "alembic", "mako", "pydantic", "pydantic_core", "annotated_types", "typing_inspection",
                 "typing_extensions", "cuda_bench")


def wheel_problems(folder: Path) -> list[str]:
    """What keeps `folder` from giving the GPU machine's Python 3.12 on x86-64 the packages it lacks:
    a missing one, two versions of one (pip refuses the whole install), a wheel built for another
    Python or platform."""
    if not folder.is_dir():
        return [f"{folder}: no such folder (scripts/gpu_wheels.py fetches it)"]
    found: dict[str, list[str]] = {}
    problems = []
    for wheel in sorted(folder.glob("*.whl")):
        parts = wheel.stem.split("-")
        if len(parts) < 5:
            problems.append(f"{wheel.name}: not a wheel's name")
            continue
        found.setdefault(parts[0].lower(), []).append(wheel.name)
        python, platform = parts[-3], parts[-1]
        if not (python.startswith(("py3", "cp312")) and (platform == "any" or "x86_64" in platform)):
            problems.append(f"{wheel.name}: built for {python} on {platform}, not CPython 3.12 on x86-64")
    problems += [f"{name}: no wheel" for name in WHEELS_NEEDED if name not in found]
    problems += [f"{name}: {len(names)} versions ({', '.join(names)}): keep one" for name, names in found.items()
                 if len(names) > 1]
    return problems


# ---------------------------------------------------------------- the whole plan


def check_plan(steps: Sequence[plan.Step], settings: plan.LoanSettings) -> list[CommandCheck]:
    """Every command line of the plan, checked; nothing is run but `make -n` and pytest's collection."""
    checkers = {plan.CommandKind.ROOFLAB: check_rooflab, plan.CommandKind.SCRIPT: check_script,
                plan.CommandKind.MAKE: check_make, plan.CommandKind.TOOL: check_tool}
    out = []
    for step in steps:
        for command in step.commands:
            line = " ".join(command.argv(settings.python))
            out.append(checkers[command.kind](step.name, command, line))
    return out


def main_check(steps: Sequence[plan.Step], settings: plan.LoanSettings, wheels: Path | None = None) -> int:
    checks = check_plan(steps, settings)
    for c in checks:
        cases = f"  [{c.selected} selected]" if c.selected is not None else ""
        print(f"{'ok ' if c.accepted else 'BAD'} {c.step:<14} {c.line[:150]}{cases}")
        if not c.accepted or c.message:
            print(f"    {c.message}")
    problems = plan.expected_fits(steps) + (wheel_problems(wheels) if wheels is not None else [])
    for p in problems:
        print(f"BAD {p}")
    accepted = sum(c.accepted for c in checks)
    print(f"{accepted} of {len(checks)} command lines accepted; expected total {plan.expected_total_s(steps):.0f} s "
          f"of {plan.BUDGET_S} s")
    return 0 if accepted == len(checks) and not problems else 1
