"""Fakes of a GPU machine for the loan's dry run (tests/scripts/test_gpu_loan_dry_run.py): an
interpreter that records each command line it is given and writes the files the line names, an
`nvidia-smi` that records its arguments, and tests/runners/fake_ncu.py as `ncu`.

The fake interpreter, steered by environment variables:
  FAKE_PY_LOG           a file that gets one JSON line per call: {"argv": [...], "pytest_addopts": ..., "pid": N}
  FAKE_OUTPUT_BYTES     random (incompressible) bytes written into each file a line names (default 256):
                        after --out, --json, --markdown, in --keep-reports, in --junitxml of PYTEST_ADDOPTS,
                        and a real SQLite database of about that size at --db sqlite:///PATH
  FAKE_PY_FAIL          a word: a line holding it exits 7 after a message on stderr
  FAKE_PY_HANG          a word: a line holding it sleeps 60 s (FAKE_PY_IGNORE_INT=1: deaf to SIGINT)
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAKE_PYTHON = r'''
import json, os, signal, sqlite3, sys, time
from pathlib import Path

argv = sys.argv[1:]
line = " ".join(argv)
with open(os.environ["FAKE_PY_LOG"], "a") as log:
    log.write(json.dumps({"argv": argv, "pytest_addopts": os.environ.get("PYTEST_ADDOPTS"), "pid": os.getpid()}) + "\n")
size = int(os.environ.get("FAKE_OUTPUT_BYTES", "256"))
hang, fail = os.environ.get("FAKE_PY_HANG"), os.environ.get("FAKE_PY_FAIL")
if hang and hang in line:
    if os.environ.get("FAKE_PY_IGNORE_INT") == "1":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(60)
if fail and fail in line:
    print(f"planted failure: {line}", file=sys.stderr)
    sys.exit(7)


def payload(path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))


for flag, value in zip(argv, argv[1:]):
    if flag in ("--out", "--json", "--markdown") and not value.startswith("-"):
        payload(value if Path(value).suffix else Path(value) / "index.html")
    elif flag == "--keep-reports":
        payload(Path(value) / f"case-{os.getpid()}.csv")
    elif flag == "--db" and value.startswith("sqlite:///"):
        db = sqlite3.connect(value.removeprefix("sqlite:///"))
        db.execute("create table if not exists blobs (b blob)")
        db.execute("insert into blobs values (?)", (os.urandom(size),))
        db.commit()
        db.close()
for word in (os.environ.get("PYTEST_ADDOPTS") or "").split():
    if word.startswith("--junitxml="):
        payload(word.removeprefix("--junitxml="))
print("{}")
'''
FAKE_NVIDIA_SMI = """#!/usr/bin/env bash
echo "nvidia-smi $*" >> "$FAKE_SMI_LOG"
echo "fake nvidia-smi: $*"
"""


@dataclass(frozen=True)
class Fakes:
    python: Path
    bin: Path  # nvidia-smi and ncu: first on PATH
    py_log: Path
    smi_log: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "FAKE_PY_LOG": str(self.py_log),
                "FAKE_SMI_LOG": str(self.smi_log), **extra}


def install(folder: Path) -> Fakes:
    bindir = folder / "bin"
    bindir.mkdir(parents=True)
    python = folder / "fakepython"
    python.write_text(f"#!{sys.executable} -S\n" + FAKE_PYTHON)
    smi = bindir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    ncu = bindir / "ncu"
    ncu.write_text(f"#!{sys.executable}\n" + (HERE.parent / "runners" / "fake_ncu.py").read_text(encoding="utf-8"))
    for exe in (python, smi, ncu):
        exe.chmod(0o755)
    return Fakes(python, bindir, folder / "python-calls.jsonl", folder / "smi-calls.txt")
