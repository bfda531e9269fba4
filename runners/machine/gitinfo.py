"""The rooflab checkout's git commit and whether it has uncommitted changes to tracked files."""
from __future__ import annotations

import subprocess
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # runners/machine/gitinfo.py -> the checkout


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(root: str | Path = PROJECT_ROOT) -> tuple[str | None, bool]:
    """(commit sha, dirty) of the checkout at `root`; (None, False) outside a git checkout of it.

    Only a repository whose top level is `root` counts (not one that merely contains an installed
    copy). Dirty means tracked files differ from the commit (untracked files are ignored, as
    setuptools-scm does).
    """
    root = Path(root).resolve()
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != root:
        return None, False
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None, False
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit.strip(), bool(status and status.strip())
