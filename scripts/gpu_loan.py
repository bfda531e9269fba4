"""The GPU loan in one call: set-up (the carried wheels, a look at the device), the plan printed with
each step's expected seconds and their sources, then every step of scripts/gpu_loan_plan.py in
order under the budget rule, the return folder packed after each (scripts/gpu_loan_archive.py),
and a table of what each step took. docs/gpu-validation.md gives the exact device call.

    scripts/gpu-validate.sh [options] WORK        (this file, run by python3)

A failing step does not stop the next. A step past its timeout gets SIGINT (rooflab stores the case
in flight), then SIGKILL after the kill grace; the rest of its commands are not run. Exit code 0
when every step ran ok (or was skipped for want of a tool), 1 when one failed, timed out or was
left out for want of budget, 2 on bad usage (one message, nothing written).
Standard library only, so that it runs before the wheels are installed.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import gpu_loan_archive as archive  # the sibling modules: scripts/ is the path's first entry
import gpu_loan_plan as plan

ROOT = Path(__file__).resolve().parents[1]
END_MARGIN_S = 15  # the run ends this long before --call-limit-s: the last packing and the reply
PROBE_TIMEOUT_S = 120
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
PROBE = """import json, sys
out = {"python": sys.version.split()[0]}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.cuda.is_available()
    out["device"] = torch.cuda.get_device_name(0) if out["cuda"] else None
except Exception as exc:
    out["cuda"], out["error"] = False, repr(exc)[:300]
missing = []
for name in ("sqlalchemy", "alembic", "pydantic", "typer", "rooflab.runners.cli.app"):
    try:
        __import__(name)
    except Exception as exc:
        missing.append(f"{name}: {exc!r}"[:200])
out["import_errors"] = missing
print(json.dumps(out))
"""


class UsageError(Exception):
    """Bad usage: one message, exit code 2, nothing written."""


@dataclass
class Outcome:
    name: str
    status: str  # ok, failed, timeout, skipped, not-started, interrupted
    rc: int | None = None
    seconds: float = 0.0
    timeout_s: float = 0.0
    commands_run: int = 0
    note: str = ""


@dataclass
class Loan:
    """One loan call: where it writes, what it runs, and what happened so far."""

    work: Path
    folder: Path | None
    settings: plan.LoanSettings
    steps: list[plan.Step]
    budget_s: float
    grace_s: float
    max_bytes: int
    env: dict[str, str]
    started: float = field(default_factory=time.monotonic)
    outcomes: list[Outcome] = field(default_factory=list)
    setup_s: float = 0.0
    stopping: bool = False
    current: subprocess.Popen | None = None

    pending: list[str] = field(default_factory=list)  # printed before the work folder was made

    def log(self, text: str) -> None:
        print(text, flush=True)
        if not self.work.is_dir():
            self.pending.append(text)
            return
        with (self.work / "loan.log").open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in [*self.pending, text]))
        self.pending.clear()

    def make_folders(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)


# ---------------------------------------------------------------- the command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/gpu-validate.sh", description=__doc__.splitlines()[0])
    p.add_argument("work", help="the work folder: every artifact, the database and the logs (new or empty)")
    p.add_argument("--archive", type=Path, help="the return folder (the device call's $OUT): packed after every step")
    p.add_argument("--steps", help="these steps, in this order (default, in priority order: "
                                   f"{','.join(plan.STEP_NAMES)})")
    p.add_argument("--rounds", type=int, default=plan.DEFAULT_ROUNDS, help="cross-check rounds (default 3)")
    p.add_argument("--budget-s", type=float, default=plan.BUDGET_S, help="seconds of steps after set-up (480)")
    p.add_argument("--call-limit-s", type=float, help="the device call's timeout_s: the loan ends 15 s before it")
    p.add_argument("--python", default=sys.executable, help="the interpreter of every step (default: this one)")
    p.add_argument("--wheels", type=Path, help="install these *.whl into --site first (part of set-up)")
    p.add_argument("--site", type=Path, default=Path("/tmp/site"), help="where --wheels go (default /tmp/site)")
    p.add_argument("--ncu", help="Nsight Compute (default: ncu on PATH, in /usr/local/cuda/bin or /opt/nvidia)")
    p.add_argument("--device-kind", choices=("auto", "cuda"), default="auto",
                   help="auto: ask the interpreter for a CUDA device and refuse without one; cuda: take it as given")
    p.add_argument("--test-gpu-files", help="comma-separated test files of the test-gpu step")
    p.add_argument("--kill-grace-s", type=float, default=plan.KILL_GRACE_S, help="SIGKILL this long after SIGINT")
    p.add_argument("--archive-max-bytes", type=int, default=archive.RETURN_MAX_FILE_BYTES,
                   help="the largest file the return folder may hold (16 MiB)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--plan", action="store_true", help="print the plan and exit (no GPU needed)")
    mode.add_argument("--plan-json", action="store_true", help="print the plan as JSON and exit (no GPU needed)")
    mode.add_argument("--check", action="store_true",
                      help="check the plan on this machine: every command line against the real CLI, every filter "
                           "against the CUDA expansion, the test files (no GPU needed)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: at least 1")
    if args.budget_s <= 0 or args.kill_grace_s < 0 or args.archive_max_bytes <= 0:
        p.error("--budget-s and --archive-max-bytes must be > 0, --kill-grace-s >= 0")
    return args


def find_ncu(given: str | None) -> str | None:
    if given:
        return given if shutil.which(given) else None
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_PLACES:
        hits = sorted(glob.glob(pattern))
        if hits and os.access(hits[-1], os.X_OK):
            return hits[-1]
    return None


def settings_from(args: argparse.Namespace, ncu: str | None) -> plan.LoanSettings:
    work = str(Path(args.work).absolute())
    files = tuple(f for f in (args.test_gpu_files or "").split(",") if f) or plan.TEST_GPU_FILES
    return plan.LoanSettings(work=work, python=args.python, rounds=args.rounds, ncu=ncu or "ncu", test_files=files)


def check_folders(work: Path, folder: Path | None) -> None:
    """The work folder new or empty; the return folder apart from it, new or empty."""
    for path, what in ((work, "the work folder"), (folder, "--archive")):
        if path is None:
            continue
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise UsageError(f"{what} {path} exists and is not an empty folder")
    if folder is not None:
        a, b = work.absolute(), folder.absolute()
        if a == b or a in b.parents or b in a.parents:
            raise UsageError(f"--archive {folder} must be apart from the work folder {work}")


# ---------------------------------------------------------------- set-up


def step_env(args: argparse.Namespace, ncu: str | None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(args.site)] if args.wheels else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    if ncu:
        env["PATH"] = os.pathsep.join([str(Path(ncu).parent), env.get("PATH", "")])
    return env


def install_wheels(loan: Loan, wheels: Path, site: Path, python: str) -> None:
    files = sorted(str(p) for p in wheels.glob("*.whl"))
    if not files:
        loan.log(f"set-up: no wheels in {wheels}")
        return
    argv = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
            "--upgrade", "--target", str(site), *files]
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    loan.log(f"set-up: {len(files)} wheels into {site} in {time.monotonic() - t0:.1f} s (exit {done.returncode})")
    if done.returncode != 0:
        loan.log("set-up: the wheel install failed: " + (done.stderr.strip().splitlines() or ["?"])[-1])


def probe_device(loan: Loan, python: str) -> dict:
    """What the steps' interpreter sees: torch, a CUDA device, whether rooflab and its packages import."""
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=loan.env, cwd=ROOT,
                              timeout=PROBE_TIMEOUT_S, check=False)
        seen = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        seen = {"cuda": False, "error": f"the probe failed: {exc!r}"[:300]}
    for error in seen.get("import_errors", []):
        loan.log(f"set-up: WARNING: {error} (are the wheels there? scripts/gpu_wheels.py)")
    return seen


# ---------------------------------------------------------------- one step


def run_command(loan: Loan, command: plan.Command, log: Path, until: float) -> tuple[int, bool]:
    """One command line, its stdout into its file (else the log), until the monotonic time `until`:
    then SIGINT to its process group, SIGKILL after the grace. Returns (exit code, stopped)."""
    argv = command.argv(loan.settings.python)
    env = dict(loan.env)
    for name, words in command.env_append:
        env[name] = " ".join(filter(None, [env.get(name, ""), words]))
    out_path = Path(loan.settings.work) / command.stdout if command.stdout else None
    if out_path:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as lf:
        lf.write(f"$ {shlex.join(argv)}{' > ' + str(out_path) if out_path else ''}\n".encode())
        lf.flush()
        out = out_path.open("wb") if out_path else lf
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=lf, cwd=ROOT, env=env, start_new_session=True)
        except OSError as exc:
            lf.write(f"cannot start: {exc}\n".encode())
            return 127, False
        finally:
            if out is not lf:
                out.close()
        loan.current = proc
        rc, stopped = wait_or_stop(proc, until, loan.grace_s)
        loan.current = None
        lf.write(f"# exit {rc}{' (stopped at its timeout)' if stopped else ''}\n".encode())
    return rc, stopped


def wait_or_stop(proc: subprocess.Popen, until: float, grace_s: float) -> tuple[int, bool]:
    stopped = False
    try:
        rc = proc.wait(timeout=max(0.0, until - time.monotonic()))
    except subprocess.TimeoutExpired:
        stopped = True
        signal_group(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    signal_group(proc.pid, signal.SIGKILL)  # whatever it started and left behind
    return rc, stopped


def signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def said_skip(log: Path) -> str | None:
    """The reason after `SKIP: ` in the log's last command output, for exit code 3."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        if line.startswith("$ "):
            return None
        if line.startswith("SKIP: "):
            return line[6:].strip()
    return None


def last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines()
             if ln.strip() and not ln.startswith(("$ ", "# exit"))]
    return (lines[-1] if lines else "").replace("\t", " ")[:200]


def run_step(loan: Loan, step: plan.Step, timeout_s: float) -> Outcome:
    log = loan.work / "logs" / f"{step.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    until = t0 + timeout_s
    outcome = Outcome(step.name, "ok", 0, timeout_s=timeout_s)
    for command in step.commands:
        if loan.stopping:
            outcome.status, outcome.note = "interrupted", "the loan call was interrupted"
            break
        rc, stopped = run_command(loan, command, log, until)
        outcome.commands_run += 1
        if stopped:
            outcome.status, outcome.rc = "timeout", rc
            left = len(step.commands) - outcome.commands_run
            outcome.note = f"stopped after {timeout_s:.0f} s; {left} command(s) not run"
            break
        if rc == 3 and (why := said_skip(log)) is not None:
            if outcome.status == "ok":
                outcome.status, outcome.note = "skipped", why
        elif rc != 0:
            outcome.status, outcome.rc, outcome.note = "failed", rc, last_line(log)
    outcome.seconds = time.monotonic() - t0
    return outcome


# ---------------------------------------------------------------- the loan


def write_steps_tsv(loan: Loan) -> None:
    rows = ["step\tstatus\trc\tseconds\texpected_s\ttimeout_s\tcommands\tlog\tnote",
            f"setup\tok\t-\t{loan.setup_s:.1f}\t-\t-\t-\tloan.log\tfrom the call's start to its first step"]
    expected = {s.name: s for s in loan.steps}
    for o in loan.outcomes:
        step = expected[o.name]
        rows.append(f"{o.name}\t{o.status}\t{'-' if o.rc is None else o.rc}\t{o.seconds:.1f}\t{step.expected_s:.0f}\t"
                    f"{o.timeout_s:.0f}\t{o.commands_run}/{len(step.commands)}\tlogs/{o.name}.log\t{o.note}")
    (loan.work / "steps.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")


def write_plan_json(loan: Loan) -> None:
    data = plan.plan_dict(loan.steps, loan.settings, loan.budget_s)
    data["setup_s"] = round(loan.setup_s, 1)
    data["outcomes"] = [o.__dict__ for o in loan.outcomes]
    (loan.work / "plan.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def pack(loan: Loan) -> float:
    """steps.tsv and plan.json written, the return folder packed; the seconds it took."""
    t0 = time.monotonic()
    write_steps_tsv(loan)
    write_plan_json(loan)
    if loan.folder is not None:
        packed = archive.pack(loan.work, loan.folder, loan.work / "rooflab.db", loan.max_bytes)
        for line in packed.left_out:
            loan.log(f"   packing: left out {line}")
        if packed.database_note:
            loan.log(f"   packing: {packed.database_note}")
    return time.monotonic() - t0


def start_timeout(loan: Loan, index: int, deadline: float) -> float:
    step = loan.steps[index]
    return plan.step_timeout_s(step, deadline - time.monotonic(), plan.later_reserve_s(loan.steps, index),
                               loan.grace_s)


def run_loan(loan: Loan, deadline: float, ncu: str | None) -> None:
    for index, step in enumerate(loan.steps):
        timeout_s = start_timeout(loan, index, deadline)
        if loan.stopping:
            outcome = Outcome(step.name, "interrupted", note="the loan call was interrupted")
        elif step.needs == "ncu" and ncu is None:
            outcome = Outcome(step.name, "skipped", note="Nsight Compute (ncu) not found: not on PATH, nor in "
                                                         + ", ".join(NCU_PLACES))
        elif timeout_s < plan.MIN_TIMEOUT_S:
            outcome = Outcome(step.name, "not-started", timeout_s=max(timeout_s, 0.0),
                              note=f"budget spent: {max(timeout_s, 0.0):.0f} s left after the later steps' reserves")
        else:
            loan.log(f"== {step.name}: timeout {timeout_s:.0f} s (box {step.box_s} s), "
                     f"expected {step.expected_s:.0f} s")
            outcome = run_step(loan, step, timeout_s)
        loan.outcomes.append(outcome)
        packing_s = pack(loan)
        loan.log(f"   {step.name}: {outcome.status} ({'exit ' + str(outcome.rc) + ', ' if outcome.rc else ''}"
                 f"{outcome.seconds:.1f} s; packed in {packing_s:.1f} s){': ' + outcome.note if outcome.note else ''}")


def summary(loan: Loan) -> str:
    total = time.monotonic() - loan.started
    lines = ["", f"==================== steps (set-up {loan.setup_s:.1f} s, whole call {total:.0f} s, budget "
                 f"{loan.budget_s:.0f} s after set-up)",
             f"{'step':<14}{'status':<13}{'rc':>4}{'seconds':>9}{'expected':>10}{'timeout':>9}  note"]
    for o in loan.outcomes:
        step = next(s for s in loan.steps if s.name == o.name)
        lines.append(f"{o.name:<14}{o.status:<13}{'-' if o.rc is None else o.rc:>4}{o.seconds:>9.1f}"
                     f"{step.expected_s:>10.0f}{o.timeout_s:>9.0f}  {o.note}")
    if loan.folder is not None:
        problems = archive.return_folder_problems(loan.folder, max_file_bytes=loan.max_bytes)
        files = sorted(p for p in loan.folder.iterdir() if p.is_file())
        lines.append(f"returned in {loan.folder}: " + ", ".join(f"{p.name} ({p.stat().st_size} B)" for p in files))
        lines += [f"RETURN LIMIT: {p}" for p in problems]
    return "\n".join(lines)


def interrupt(loan: Loan) -> None:
    def handler(signum: int, frame: object) -> None:
        loan.stopping = True
        if loan.current is not None:
            signal_group(loan.current.pid, signal.SIGINT)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def prepare(args: argparse.Namespace) -> tuple[Loan, str | None]:
    """The loan's plan built and its folders checked (not made); UsageError on bad usage."""
    ncu = find_ncu(args.ncu)
    settings = settings_from(args, ncu)
    try:
        steps = plan.loan_plan(settings, args.steps.split(",") if args.steps else None)
    except plan.PlanError as exc:
        raise UsageError(str(exc)) from None
    work = Path(settings.work)
    check_folders(work, args.archive)
    if args.wheels is not None and not args.wheels.is_dir():
        raise UsageError(f"--wheels {args.wheels}: not a folder")
    loan = Loan(work, args.archive, settings, steps, args.budget_s, args.kill_grace_s, args.archive_max_bytes,
                step_env(args, ncu))
    return loan, ncu


def loan_call(args: argparse.Namespace, started: float) -> int:
    loan, ncu = prepare(args)
    loan.started = started
    interrupt(loan)
    loan.log(f"gpu loan: work {loan.work}, return folder {loan.folder}, python {args.python}, ncu {ncu}")
    if args.wheels is not None:
        install_wheels(loan, args.wheels, args.site, args.python)
    if args.device_kind == "auto":
        seen = probe_device(loan, args.python)
        loan.log(f"set-up: {json.dumps(seen)}")
        if not seen.get("cuda"):
            print("gpu-validate: no CUDA device: this call is for a GPU machine (--plan, --plan-json and --check "
                  "run anywhere); nothing measured, nothing written", file=sys.stderr)
            return 2
    loan.make_folders()
    loan.log(plan.plan_text(loan.steps, loan.budget_s))
    for problem in plan.expected_fits(loan.steps, loan.budget_s):
        loan.log(f"plan: WARNING: {problem}")
    loan.setup_s = time.monotonic() - started
    deadline = time.monotonic() + loan.budget_s
    if args.call_limit_s:
        deadline = min(deadline, started + args.call_limit_s - END_MARGIN_S)
    loan.log(f"set-up took {loan.setup_s:.1f} s; steps until {deadline - started:.0f} s into the call")
    run_loan(loan, deadline, ncu)
    loan.log(summary(loan))
    bad = [o for o in loan.outcomes if o.status not in ("ok", "skipped")]
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    settings = settings_from(args, find_ncu(args.ncu))
    try:
        if args.plan or args.plan_json or args.check:
            steps = plan.loan_plan(settings, args.steps.split(",") if args.steps else None)
            if args.plan:
                print(plan.plan_text(steps, args.budget_s))
                return 0
            if args.plan_json:
                data = plan.plan_dict(steps, settings, args.budget_s)
                data["return"] = archive.limits()
                print(json.dumps(data, indent=2))
                return 0
            import gpu_loan_check  # rooflab and its libraries: only for the dry run's checks, not the call

            return gpu_loan_check.main_check(steps, settings, args.wheels)
        return loan_call(args, started)
    except (UsageError, plan.PlanError) as exc:
        print(f"gpu-validate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
