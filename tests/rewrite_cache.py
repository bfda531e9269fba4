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
(another pytest), nothing is written and each worker rewrites for itself as before.
"""
from __future__ import annotations

from pathlib import Path

import pytest

# what pytest rewrites in a test folder: its conftest files and the files its `python_files` names
# (it also rewrites what a plugin marks with register_assert_rewrite; these tests mark nothing)
CONFTEST = "conftest.py"


def targets(config: pytest.Config) -> list[Path]:
    """The files and folders the run collects: those on its command line (a node id's file), else
    its `testpaths`."""
    given = [arg.split("::", 1)[0] for arg in config.args]
    base = config.invocation_params.dir
    if not given:
        given, base = list(config.getini("testpaths") or ["."]), config.rootpath
    return [(base / arg).resolve() for arg in given]


def rewritten_modules(config: pytest.Config, paths: list[Path]) -> list[Path]:
    """The modules pytest would rewrite to collect PATHS (files or folders), in a stable order: the
    test files among them and the conftest files of their folders, up to the run's root folder."""
    from _pytest.pathlib import fnmatch_ex

    patterns = config.getini("python_files")
    found: set[Path] = set()
    for target in paths:
        files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
        found.update(p for p in files if p.name == CONFTEST or any(fnmatch_ex(pattern, p) for pattern in patterns))
        for folder in target.parents:
            if (folder / CONFTEST).is_file():
                found.add(folder / CONFTEST)
            if folder == config.rootpath:
                break
    return sorted(p for p in found if p.suffix == ".py" and p.is_file())


def rewrite_once(config: pytest.Config, paths: list[Path] | None = None) -> int:
    """Write the rewritten code of each test module the run collects (PATHS, by default its
    `targets`) whose stored copy is missing or stale; how many were written."""
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return 0
    written = 0
    try:
        state = config.stash[rewrite.assertstate_key]
        for path in rewritten_modules(config, targets(config) if paths is None else paths):
            cache = rewrite.get_cache_dir(path)
            pyc = cache / (path.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(path, pyc) is not None or not rewrite.try_makedirs(cache):
                continue
            source_hash, code = rewrite._rewrite_test(path, config)
            written += bool(rewrite._write_pyc(state, code, source_hash, pyc))
    except (AttributeError, KeyError, TypeError, OSError, SyntaxError):
        # another pytest's internals, an unreadable folder, a module that does not parse (its
        # worker reports it as a collection error): the workers rewrite the rest for themselves
        pass
    return written
