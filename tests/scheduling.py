"""How `make test` spreads the tests over its pytest-xdist workers (tests/conftest.py installs it).

A unit of work is one test, so that a module of slow tests is shared by the workers, or one whole
module when the module builds a fixture for all its tests (a `scope="module"` fixture: a database
written by a night of runs, a two-node Slurm cluster): split over two workers, each would build it.
The units go out in collection order (`make test` passes `--no-loadscope-reorder`), which
tests/conftest.py sorts so that the modules in SLOW_FIRST lead: a long unit handed out last would
leave one worker running alone at the end while the other idles.

pytest-xdist's own grouping (`xdist_group` with `--dist loadgroup`) does not group under pytest 9.2
(the group never reaches the node id), so the grouping is decided here, from the module's source.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

# A fixture shared by a module's (or a class's) tests, as a decorator declares it.
SHARED_FIXTURE = re.compile(r"""@pytest\.fixture\([^)]*scope\s*=\s*["'](module|class|package)["']""")

# The modules whose tests take longest, handed out first in this order (`make test` prints the ten
# slowest tests; measured on 2 cores, docs/development.md): the slowest first, then tests that wait
# on processes mixed with tests that compute, so that the two workers seldom wait at once. Only an
# order: a module missing here is run too.
SLOW_FIRST: tuple[str, ...] = (
    "tests/runners/cluster/test_slurm_real.py",  # whole, about 95 s, much of it waiting on its jobs
    # beside it, whole modules that keep their worker's core busy in process, then the
    # multi-process modules (waiting on their processes too) mixed with in-process ones
    "tests/reports/data/test_reads.py",
    "tests/reports/pages/test_html.py",
    "tests/runners/test_attribution.py",
    "tests/runners/cluster/test_cluster_e2e.py",
    "tests/reports/regressions/test_regressions_db.py",
    "tests/runners/test_collective_env.py",
    "tests/runners/cluster/test_cluster_e2e_nightly.py",
    "tests/runners/test_devlock.py",
    "tests/runners/test_collective_runs.py",
    "tests/runners/test_counters_cli.py",
    "tests/db/test_concurrency.py",
    "tests/runners/test_run_cli.py",
    "tests/runners/test_collectives.py",
    # test_gpu_loan_dry_run and test_supervisor each have a test that mostly waits (a hung step's
    # timeout, a hanging case's): apart, each beside a module that computes, not at the end nor
    # beside the other's wait
    "tests/scripts/test_gpu_loan_dry_run.py",
    "tests/runners/cluster/test_nightly.py",
    "tests/runners/test_supervisor.py",
    "tests/runners/test_crosscheck.py",
    "tests/suite/test_ops_compiled.py",
    "tests/test_readme_examples.py",
)


@functools.cache
def runs_whole(module: Path) -> bool:
    """Whether the module declares a fixture that its tests share (then one worker runs it all)."""
    try:
        return SHARED_FIXTURE.search(module.read_text(encoding="utf-8")) is not None
    except OSError:  # not a file (a doctest's node id, a module in a package's __init__)
        return False


class WholeModulesScheduling(LoadScopeScheduling):
    """LoadScopeScheduling whose scope is the test, or its module when the module shares a fixture."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return module if runs_whole(self.config.rootpath / module) else nodeid
