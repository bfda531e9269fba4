"""suite.child.ChildCall: a result, an error as text, a dead child reported at once, a timeout and a
cancel that leave no process behind, the caller's environment of now."""
from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from rooflab.suite.child import TERMINATE_GRACE_S, ChildCall, ChildCallError
from tests.suite import child_targets as t

SPAWN = multiprocessing.get_context("spawn")


def test_the_result_comes_back_from_another_process() -> None:
    a, b = (int(x) for x in os.urandom(2))
    total, pid = ChildCall(t.add, (a, b), SPAWN).result(60)
    assert total == a + b and pid != os.getpid()


def test_the_callers_environment_of_now_is_the_childs(monkeypatch: pytest.MonkeyPatch) -> None:
    value = os.urandom(6).hex()
    monkeypatch.setenv("ROOFLAB_CHILD_TEST", value)
    assert ChildCall(t.env, ("ROOFLAB_CHILD_TEST",), SPAWN).result(60) == value


def test_an_error_comes_back_as_its_type_and_text_even_one_that_cannot_be_rebuilt() -> None:
    with pytest.raises(ChildCallError, match="KeyError: 'planted'"):
        ChildCall(t.fail, ("planted",), SPAWN).result(60)
    with pytest.raises(ChildCallError, match="NeedsTwoArgs: x/y"):
        ChildCall(t.fail_unpicklable, (), SPAWN).result(60)


def test_a_child_that_dies_is_reported_at_once_with_its_exit_code() -> None:
    started = time.monotonic()
    with pytest.raises(ChildCallError, match="exit code 3"):
        ChildCall(t.die, (3,), SPAWN).result(120)
    assert time.monotonic() - started < 30  # not the 120 s timeout


def test_a_timeout_or_a_cancel_ends_the_child() -> None:
    call = ChildCall(t.sleep, (60,), SPAWN)
    asked = time.monotonic()
    with pytest.raises(ChildCallError, match="no result in 2 s"):
        call.result(2)
    assert not call._process.is_alive()
    # ended at once: the grace a child gets to exit after it has answered is not spent on one that did not
    assert time.monotonic() - asked < 2 + TERMINATE_GRACE_S / 2
    call = ChildCall(t.sleep, (60,), SPAWN)
    call.cancel()
    call.cancel()  # idempotent
    assert not call._process.is_alive() and call._process.exitcode is not None
