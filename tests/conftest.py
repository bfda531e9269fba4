"""Fixtures shared by every test package."""
from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import MutableMapping

import pytest


def _share_the_cores(environ: MutableMapping[str, str] = os.environ) -> None:
    """Under pytest-xdist each worker's torch, and every process a test starts from it (a run's
    worker, its ranks, a peer), gets its share of the cores, not all of them: a CPU case runs with
    OMP_NUM_THREADS threads (runners/machine/cpuinfo.py), and N workers each timing with every core
    would oversubscribe the machine N times, so that a case's time budget burns N times the CPU
    and one worker's spinning threads slow the other's. The cores shared out are those a case would
    take alone (physical cores this process may run on). A value the caller set is kept."""
    from rooflab.runners.machine.cpuinfo import default_cpu_threads  # imports no torch

    workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT") or "1")
    if workers > 1 and not environ.get("OMP_NUM_THREADS"):
        environ["OMP_NUM_THREADS"] = str(max(1, default_cpu_threads() // workers))


_share_the_cores()  # before anything imports torch: its thread pool reads the variable once


@pytest.fixture(autouse=True)
def _isolated_op_registry():
    """Ops that a test registers (planted faults loaded through ROOFLAB_PLUGINS) do not leak into
    later tests: the registry is restored, and the modules that registered them are forgotten so
    that a later test naming the same plugin imports (and registers) them afresh."""
    from rooflab.suite.ops import registry

    registry.all_ops()  # the built-in ops are loaded before the snapshot, never counted as added
    saved = dict(registry._ops)
    saved_plugins = set(registry._plugins_loaded)
    yield
    added = {name: op for name, op in registry._ops.items() if name not in saved}
    registry._ops.clear()
    registry._ops.update(saved)
    for op in added.values():
        if type(op).__module__ not in registry.BUILTIN_MODULES:
            sys.modules.pop(type(op).__module__, None)
    registry._plugins_loaded.clear()
    registry._plugins_loaded.update(saved_plugins)


@pytest.fixture(scope="session", autouse=True)
def _each_cli_built_once():
    """CliRunner.invoke builds the Click command of its Typer app on every call: for rooflab's app
    that reads the signature of every command, tens of ms of CPU per call. An app does not change
    once its commands are registered, so the tests build each app's command once and reuse it (what
    the `rooflab` entry point does in its one call)."""
    import typer.main
    import typer.testing

    saved = getattr(typer.testing, "_get_command", None)  # Typer's own; another Typer may lack it
    if saved is None:
        yield
        return
    typer.testing._get_command = functools.cache(typer.main.get_command)  # an app hashes by identity
    yield
    typer.testing._get_command = saved


@pytest.fixture(scope="session", autouse=True)
def _private_device_locks(tmp_path_factory):
    """Runs started by a test take their device locks in a folder of this test session's own: a run
    elsewhere on the host (another checkout's tests, a benchmark) must not make a test wait or refuse.
    Session-wide, so that module-scoped fixtures that run a spec use it too; a test that plants a
    lock sets a folder of its own (monkeypatch) on top."""
    saved = os.environ.get("ROOFLAB_LOCK_DIR")
    os.environ["ROOFLAB_LOCK_DIR"] = str(tmp_path_factory.mktemp("locks"))
    yield
    if saved is None:
        os.environ.pop("ROOFLAB_LOCK_DIR", None)
    else:
        os.environ["ROOFLAB_LOCK_DIR"] = saved


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the collection made (the modules it imported: torch, pandas, matplotlib, SQLAlchemy, and
    the test modules) lives for the whole session: frozen out of the cyclic garbage collector's reach
    (gc.freeze), its full collections stop walking those objects again after every few thousand
    allocations. Over tests/reports and tests/db in one process the collector's time fell from 11.8 s
    to 7.0 s of 146 s; a test's own objects are collected as before."""
    gc.freeze()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist, the controller rewrites the tests' asserts once, before it starts the
    workers (tests/rewrite_cache.py): each worker would otherwise rewrite every test module itself."""
    if session.config.pluginmanager.hasplugin("dsession"):
        from tests.rewrite_cache import rewrite_once

        rewrite_once(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadscope` (`make test`) as tests/scheduling.py scopes it: one test, or a whole module
    whose tests share a fixture. Other --dist modes are pytest-xdist's own."""
    from tests.scheduling import WholeModulesScheduling

    if config.getvalue("dist") != "loadscope":
        return None
    return WholeModulesScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules of tests/scheduling.py's SLOW_FIRST first, in that order, the rest as collected
    (a stable sort: a module's tests stay together and in their order)."""
    from tests.scheduling import SLOW_FIRST

    rank = {module: i for i, module in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
