"""Nsight Compute's command line: where `ncu` is, its version, the command of one profiled pass, and
what its output says when it could not count.

One pass is

    ncu --target-processes all --nvtx --nvtx-include RANGE/ --cache-control all|none
        --clock-control none --metrics M1,M2,... --csv --page raw --print-units base
        --log-file FILE  PYTHON -m rooflab.runners.counters.child REQUEST

- `--nvtx --nvtx-include RANGE/`: only kernels launched inside the push/pop range RANGE (the
  trailing slash) are profiled: the one timed call the child wraps in it;
- `--cache-control all` flushes the caches before each kernel is measured (a cold case);
  `none` for a hot case, whose call follows a call that warmed them, and for the write-back pass
  (runners.counters.writeback: the DRAM metrics only, the child sweeping the cache itself);
- `--clock-control none` leaves the clocks as the driver sets them (ncu would lock them to base);
- `--csv --page raw --print-units base`: one CSV row per kernel, a column per metric, base units;
- `--log-file`: ncu's report goes to that file, apart from what the child prints.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rooflab.runners.errors import UserInputError
from rooflab.vocab import CacheMode

RANGE = "rooflab.counters"
CHILD_MODULE = "rooflab.runners.counters.child"
PERMISSION_CODE = "ERR_NVGPUCTRPERM"
VERSION_TIMEOUT_S = 60.0
KILL_GRACE_S = 10.0


class CountersRefusal(UserInputError):
    """Counters cannot be read here at all (no ncu, no permission, no CUDA device, a MIG slice):
    one message, exit code 2, nothing written."""


def find_ncu(path: str | None) -> str:
    """The ncu executable: `path` (--ncu) when given, else `ncu` on PATH."""
    if path:
        found = shutil.which(path) if os.sep not in path else (path if os.access(path, os.X_OK) else None)
        if found is None or not Path(found).is_file():
            raise CountersRefusal(f"--ncu {path}: not an executable file")
        return str(Path(found).resolve())
    found = shutil.which("ncu")
    if found is None:
        raise CountersRefusal(
            "Nsight Compute's `ncu` is not on PATH: install Nsight Compute (it comes with the CUDA toolkit, "
            "e.g. /usr/local/cuda/bin/ncu) and put it on PATH, or give its path with --ncu PATH"
        )
    return found


def ncu_version(exe: str) -> str:
    """The version `ncu --version` prints ("2025.1.0.0"); CountersRefusal when it does not run."""
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CountersRefusal(f"{exe} --version did not run: {exc}") from None
    text = done.stdout + done.stderr
    match = re.search(r"Version\s+([0-9][0-9A-Za-z.\-]*)", text)
    if done.returncode != 0 or match is None:
        last = text.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise CountersRefusal(f"{exe} --version gave no version: {last[0]}")
    return match.group(1)


def command(exe: str, *, metrics: Sequence[str], cache: str, log_file: Path, request: Path,
            writeback: bool = False) -> list[str]:
    """The argv of one profiled pass (see the module doc); `writeback`: the write-back pass, which
    leaves the caches alone whatever the case (runners.counters.writeback)."""
    return [
        exe, "--target-processes", "all", "--nvtx", "--nvtx-include", f"{RANGE}/",
        "--cache-control", "none" if writeback or cache == CacheMode.HOT else "all", "--clock-control", "none",
        "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base",
        "--log-file", str(log_file), sys.executable, "-m", CHILD_MODULE, str(request),
    ]


@dataclass(frozen=True)
class PassOutput:
    """What one ncu run left: its exit code, its own report (the log file) and what it printed."""

    returncode: int | None  # None: it ran past its time limit and was killed
    report: str
    printed: str

    @property
    def text(self) -> str:
        return self.report + "\n" + self.printed


def run_pass(argv: Sequence[str], *, log_file: Path, printed_file: Path, timeout_s: float) -> PassOutput:
    """Run ncu; its process group is ended when it runs past `timeout_s` or on an interrupt."""
    with printed_file.open("w", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _end_group(proc)
            returncode = None
        except BaseException:
            _end_group(proc)
            raise
    report = log_file.read_text(encoding="utf-8", errors="replace") if log_file.exists() else ""
    return PassOutput(returncode, report, printed_file.read_text(encoding="utf-8", errors="replace"))


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the group this module started (ncu and the child), SIGKILL after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def permission_denied(output: str) -> bool:
    """ncu could not read the counters: it needs root or NVreg_RestrictProfilingToAdminUsers=0."""
    return PERMISSION_CODE in output


def unknown_metrics(output: str, metrics: Sequence[str]) -> list[str]:
    """The metrics of `metrics` that an `==ERROR==` line of ncu names (a metric this GPU or this ncu
    does not know makes the whole pass fail)."""
    errors = [line for line in output.splitlines() if line.lstrip().startswith("==ERROR==")]
    return [m for m in metrics if any(re.search(rf"(?<![\w.]){re.escape(m)}(?![\w.])", line) for line in errors)]


def error_lines(output: str, limit: int = 3) -> str:
    """ncu's first `==ERROR==` lines, else the last non-empty lines: what a failed pass said."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("==ERROR==")]
    return " | ".join((errors or lines[-limit:])[:limit])
