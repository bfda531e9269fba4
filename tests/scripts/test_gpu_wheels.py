"""scripts/gpu_wheels.py: the loan's wheels fetched in a git worktree, where the fetcher alone fails.

The fetcher here is a stand-in with the real one's first steps as they are (../shared/gpu/fetch-wheels.sh:
to the top of the git checkout, `/.whl/` into `.git/info/exclude`, then the downloads into `.whl/`);
its downloads are empty files with the wheels' names, one version of each package the loan needs.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.scripts.load import load_script

wheels = load_script("gpu_wheels")
check = load_script("gpu_loan_check")

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="no git on PATH")

FETCHER = """#!/usr/bin/env bash
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
if [ -n "${FAKE_FETCH_FAIL:-}" ]; then exit "$FAKE_FETCH_FAIL"; fi
for name in $FAKE_WHEELS; do : > ".whl/$name"; done
printf '%s\\n' "$@" > .whl/extra.txt
ls .whl > .whl/seen.txt
echo 'python3 -m pip install --target /tmp/site .whl/*.whl' > .whl/activate.sh
"""


def _git(*args: str, cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, env=env, check=True,
                   capture_output=True)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    """A repository with one commit and a worktree of it (whose `.git` is a file)."""
    main = tmp_path / "main"
    main.mkdir()
    _git("init", "-q", cwd=main)
    (main / "README").write_text("x\n")
    _git("add", "README", cwd=main)
    _git("commit", "-q", "-m", "x", cwd=main)
    _git("worktree", "add", "-q", str(tmp_path / "wt"), cwd=main)
    assert (tmp_path / "wt" / ".git").is_file()
    return tmp_path / "wt"


@pytest.fixture
def fetcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "fetch-wheels.sh"
    path.write_text(FETCHER)
    path.chmod(0o755)
    version = f"{random.randint(1, 9)}.{random.randint(0, 99)}.{random.randint(0, 99)}"
    monkeypatch.setenv("FAKE_WHEELS", " ".join(f"{name}-{version}-py3-none-any.whl" for name in check.WHEELS_NEEDED))
    return path


def test_the_fetcher_alone_fails_in_a_worktree(worktree: Path, fetcher: Path) -> None:
    done = subprocess.run([str(fetcher)], cwd=worktree, capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "Not a directory" in done.stderr
    assert not (worktree / ".whl").exists()


def test_the_wheels_land_in_the_worktree(worktree: Path, fetcher: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    kept = "cuda_bench-0.1.0-cp312-cp312-manylinux_2_27_x86_64.whl"  # already there: carried to the fetcher
    (worktree / ".whl").mkdir()
    (worktree / ".whl" / kept).write_bytes(b"")
    code = wheels.main(["--fetcher", str(fetcher), "--into", str(worktree / ".whl"), "extra==1.2"])
    got = sorted(p.name for p in (worktree / ".whl").iterdir())
    assert kept in (worktree / ".whl" / "seen.txt").read_text().split()
    assert (worktree / ".whl" / "extra.txt").read_text() == "extra==1.2\n"
    assert "activate.sh" in got and len([g for g in got if g.endswith(".whl")]) == len(check.WHEELS_NEEDED) + 1
    # the carried cuda_bench and the fetched one are two versions: the same check as the loan's dry run
    assert code == 1 and "BAD cuda_bench: 2 versions" in capsys.readouterr().out
    (worktree / ".whl" / kept).unlink()
    assert wheels.main(["--fetcher", str(fetcher), "--into", str(worktree / ".whl")]) == 0
    assert "as the loan needs" in capsys.readouterr().out
    # nothing written into the repository's git folder, nothing left beside the folder
    assert "/.whl/" not in (tmp_path / "main" / ".git" / "info" / "exclude").read_text()
    assert sorted(p.name for p in worktree.iterdir()) == [".git", ".whl", "README"]


def test_a_failed_fetch_leaves_the_folder_as_it_was(worktree: Path, fetcher: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (worktree / ".whl").mkdir()
    (worktree / ".whl" / "old.whl").write_bytes(b"1")
    monkeypatch.setenv("FAKE_FETCH_FAIL", "3")
    assert wheels.main(["--fetcher", str(fetcher), "--into", str(worktree / ".whl")]) == 3
    assert [p.name for p in (worktree / ".whl").iterdir()] == ["old.whl"]
    assert wheels.main(["--fetcher", str(worktree / "none.sh")]) == 2
