"""tests/rewrite_cache.py: the controller's one rewrite of the tests' asserts, read by the workers."""
from __future__ import annotations

from pathlib import Path
from types import CodeType

import pytest
from _pytest.assertion import rewrite

from tests.rewrite_cache import rewrite_once, rewritten_modules

TEST_MODULE = "def test_sum():\n    total = sum([2, 3])\n    assert total == 5, total\n"


def _tree(root: Path) -> None:
    (root / "tests" / "deep").mkdir(parents=True)
    for skipped in (".venv", "build"):  # a virtual environment; a folder norecursedirs names
        (root / "tests" / skipped / "lib").mkdir(parents=True)
        (root / "tests" / skipped / "lib" / "test_vendored.py").write_text(TEST_MODULE, encoding="utf-8")
    (root / "tests" / ".venv" / "pyvenv.cfg").write_text("home = /usr\n", encoding="utf-8")
    (root / "tests" / "conftest.py").write_text("import pytest\n", encoding="utf-8")
    (root / "tests" / "deep" / "test_sum.py").write_text(TEST_MODULE, encoding="utf-8")
    (root / "tests" / "deep" / "helper.py").write_text("VALUE = 1\n", encoding="utf-8")  # not rewritten


def _stored(path: Path) -> CodeType | None:
    return rewrite._read_pyc(path, rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL))


def test_each_test_module_and_conftest_is_rewritten_once_and_again_when_it_changes(
        pytestconfig: pytest.Config, tmp_path: Path) -> None:
    _tree(tmp_path)
    module = tmp_path / "tests" / "deep" / "test_sum.py"
    tests = [tmp_path / "tests"]
    # not the virtual environment's or a folder norecursedirs names (pytest collects neither)
    assert [p.name for p in rewritten_modules(pytestconfig, tests, tmp_path)] == ["conftest.py", "test_sum.py"]
    assert _stored(module) is None

    assert rewrite_once(pytestconfig, tests) == 2
    code = _stored(module)
    # what pytest stored is the rewritten module: it calls pytest's assertion helpers
    assert code is not None and "@pytest_ar" in code.co_names
    assert _stored(tmp_path / "tests" / "deep" / "helper.py") is None

    assert rewrite_once(pytestconfig, tests) == 0  # up to date: nothing is rewritten again
    module.write_text(TEST_MODULE.replace("5", "5.0"), encoding="utf-8")
    assert _stored(module) is None  # stale by its source's hash
    assert rewrite_once(pytestconfig, tests) == 1
    assert _stored(module) is not None


def test_a_run_of_one_file_rewrites_that_file_and_the_conftest_files_above_it(
        pytestconfig: pytest.Config, tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "tests" / "test_other.py").write_text(TEST_MODULE, encoding="utf-8")
    module = tmp_path / "tests" / "deep" / "test_sum.py"
    assert rewritten_modules(pytestconfig, [module], tmp_path) == [tmp_path / "tests" / "conftest.py", module]
    # up to the run's root folder only: a conftest above it is not the run's
    (tmp_path / "conftest.py").write_text("import pytest\n", encoding="utf-8")
    assert rewritten_modules(pytestconfig, [module], tmp_path / "tests") == [tmp_path / "tests" / "conftest.py", module]


def test_a_pytest_without_the_functions_it_uses_leaves_the_workers_to_rewrite(
        pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    monkeypatch.delattr(rewrite, "_write_pyc")
    assert rewrite_once(pytestconfig, [tmp_path / "tests"]) == 0  # no error: the run goes on
    assert _stored(tmp_path / "tests" / "deep" / "test_sum.py") is None
