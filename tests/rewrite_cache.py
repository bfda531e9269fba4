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


def rewritten_modules(config: pytest.Config, root: Path) -> list[Path]:
    """The modules pytest would rewrite under ROOT's test folders (`testpaths`), in a stable order."""
    from _pytest.pathlib import fnmatch_ex

    patterns = config.getini("python_files")
    found: list[Path] = []
    for folder in config.getini("testpaths") or ["."]:
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == CONFTEST or any(fnmatch_ex(pattern, path) for pattern in patterns):
                found.append(path)
    return found


def rewrite_once(config: pytest.Config, root: Path | None = None) -> int:
    """Write the rewritten code of each test module under ROOT (the run's root folder) whose stored
    copy is missing or stale; how many were written."""
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return 0
    written = 0
    try:
        state = config.stash[rewrite.assertstate_key]
        for path in rewritten_modules(config, root or config.rootpath):
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
