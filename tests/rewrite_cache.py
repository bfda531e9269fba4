"""The tests' rewritten asserts, written once for the pytest-xdist workers to read.

pytest rewrites each test module's `assert`s before it runs it (the rewritten code explains a
failing assert) and keeps the result beside the module (`__pycache__/*-pytest-*.pyc`), unless the
environment says PYTHONDONTWRITEBYTECODE, as the test machines' does. Then every worker rewrote
every test module again: about 9 s of CPU per worker on the 2-core test machine, a third of its
collection. pytest reads such a file whenever it is there and matches the module's source (by
hash), whatever PYTHONDONTWRITEBYTECODE says; so the controller, which collects nothing itself,
writes them before it starts the workers (tests/conftest.py), and a later run in the same checkout
rewrites only the modules that changed.

It uses pytest's own rewriting functions, which are not public: where they are missing or fail
(another pytest), it stops, and each worker rewrites what is not stored for itself, as before.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# what pytest rewrites in a test folder: its conftest files and the files its `python_files` names
# (it also rewrites what a plugin marks with register_assert_rewrite; these tests mark nothing)
CONFTEST = "conftest.py"


def targets(config: pytest.Config) -> list[Path]:
    """The files and folders the run collects, as its command line names them (a node id by its
    file; pytest puts its `testpaths` there when the command line names nothing)."""
    base = config.invocation_params.dir
    return [(base / arg.split("::", 1)[0]).resolve() for arg in config.args]


def _walked(folder: Path, skipped: list[str]) -> list[Path]:
    """The .py files under FOLDER, not descending where pytest does not collect: a folder that
    `norecursedirs` names, or a virtual environment (one holding pyvenv.cfg)."""
    from _pytest.pathlib import fnmatch_ex

    found: list[Path] = []
    for here, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if not any(fnmatch_ex(p, f) for p in skipped)
                            and not (Path(here) / f / "pyvenv.cfg").exists())
        found += [Path(here) / f for f in files if f.endswith(".py")]
    return found


def rewritten_modules(config: pytest.Config, paths: list[Path], root: Path | None = None) -> list[Path]:
    """The modules pytest would rewrite to collect PATHS (files or folders), in a stable order: the
    test files among them and the conftest files of their folders, up to ROOT (the run's root folder)."""
    from _pytest.pathlib import fnmatch_ex

    patterns, skipped = config.getini("python_files"), config.getini("norecursedirs")
    root = root or config.rootpath
    found: set[Path] = set()
    for target in paths:
        files = _walked(target, skipped) if target.is_dir() else [target]
        found.update(p for p in files if p.name == CONFTEST or any(fnmatch_ex(pattern, p) for pattern in patterns))
        for folder in (target, *target.parents):
            if not folder.is_relative_to(root):
                break  # above the run's root folder
            if (folder / CONFTEST).is_file():
                found.add(folder / CONFTEST)
    return sorted(p for p in found if p.suffix == ".py" and p.is_file())


def rewrite_once(config: pytest.Config, paths: list[Path] | None = None) -> int:
    """Write the rewritten code of each test module the run collects (PATHS, by default its
    `targets`) whose stored copy is missing or stale; how many were written. Any failure (another
    pytest's internals, an unreadable folder, a module that does not parse, which its worker then
    reports) ends it quietly: what is not written, the workers rewrite for themselves."""
    written = 0
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        for path in rewritten_modules(config, targets(config) if paths is None else paths):
            cache = rewrite.get_cache_dir(path)
            pyc = cache / (path.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(path, pyc) is not None or not rewrite.try_makedirs(cache):
                continue
            source_hash, code = rewrite._rewrite_test(path, config)
            written += bool(rewrite._write_pyc(state, code, source_hash, pyc))
    except Exception:  # noqa: BLE001 - a cache: the run goes on without the rest of it
        pass
    return written
