"""The wheels the GPU loan carries, fetched into this checkout's .whl/ in any git checkout, a worktree too.

The fetcher, ../shared/gpu/fetch-wheels.sh, lies outside the project. It works in the git checkout it
is started in: it downloads into `<top>/.whl` and first adds `/.whl/` to `<top>/.git/info/exclude`. In
a worktree (`git worktree add`) `.git` is a file that names the main repository's folder, so that
write fails ("Not a directory") and the fetcher stops before it downloads anything. This script runs
the fetcher in a throwaway git repository of its own (the project's .gitignore ignores /.whl/
already), with the wheels the checkout holds carried in so that nothing is fetched twice, then puts
the folder it made in the checkout's place and checks it as the loan's dry run does
(gpu_loan_check.wheel_problems: one version of each package the GPU image lacks, built for its
CPython 3.12 on x86-64).

    python3 scripts/gpu_wheels.py [--into DIR] [--fetcher PATH] [EXTRA==VERSION ...]

Exit code: the fetcher's when it fails (the checkout's folder left as it was), 1 when the wheels
fetched would not serve the loan, 2 when the fetcher is not there.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gpu_loan_check import wheel_problems  # a sibling module: scripts/ is the path's first entry

ROOT = Path(__file__).resolve().parents[1]
FETCHER = ROOT.parent / "shared" / "gpu" / "fetch-wheels.sh"
FOLDER = ".whl"  # where the fetcher writes, under the top of the checkout it runs in


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--into", type=Path, default=ROOT / FOLDER, help="the folder the loan carries (default .whl)")
    p.add_argument("--fetcher", type=Path, default=FETCHER, help="default ../shared/gpu/fetch-wheels.sh")
    p.add_argument("extra", nargs="*", help="more packages for the fetcher (NAME==VERSION)")
    return p.parse_args(argv)


def fetch(fetcher: Path, into: Path, extra: Sequence[str]) -> int:
    """Run `fetcher` in a git repository of its own, then put its folder at `into`; its exit code."""
    with tempfile.TemporaryDirectory(prefix="rooflab-wheels-") as tmp:
        top = Path(tmp)
        # git's variables of the caller (a hook, a worktree's shell) would point the fetcher elsewhere
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        subprocess.run(["git", "init", "-q", str(top)], check=True, env=env)
        if into.is_dir():
            shutil.copytree(into, top / FOLDER)
        done = subprocess.run([str(fetcher), *extra], cwd=top, env=env, check=False)
        if done.returncode != 0:
            return done.returncode
        old = into.with_name(into.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if into.exists():
            into.rename(old)
        shutil.move(str(top / FOLDER), str(into))
        shutil.rmtree(old, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.fetcher.is_file():
        print(f"error: {args.fetcher}: no such file (the fetcher of the loan's wheels)", file=sys.stderr)
        return 2
    code = fetch(args.fetcher, args.into.absolute(), args.extra)
    if code != 0:
        print(f"error: {args.fetcher} ended with exit code {code}; {args.into} is as it was", file=sys.stderr)
        return code
    problems = wheel_problems(args.into)
    for problem in problems:
        print(f"BAD {problem}")
    print(f"{args.into}: {len(list(args.into.glob('*.whl')))} wheels" + ("" if problems else ", as the loan needs"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
