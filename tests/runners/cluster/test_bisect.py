"""The halving search for a slow node (runners/cluster/bisect.py) over fake halves: it names a planted
slow node in ceil(log2 N) steps whatever N and wherever the node is, names none when no half stands
out, stops when a half stores nothing; the srun command each half runs; outside an allocation, exit 2."""
from __future__ import annotations

import math
import random
import shlex
from pathlib import Path

import pytest

from rooflab.runners.cluster.bisect import (
    MIN_GAP,
    HalfResult,
    SrunHalves,
    allocation_nodes,
    bisect,
    bisect_ops,
    halves,
    slower_half,
)
from rooflab.runners.errors import UserInputError
from rooflab.suite.spec import expand, load_spec
from tests.runners.cluster.test_slurm import recorder


class FakeHalves:
    """A half's all_reduce over a ring: its busbw is its slowest node's rate (a slow node sets the
    ring's pace), with a few per cent of noise; each half measured is kept."""

    def __init__(self, rates: dict[str, float], noise: float = 0.03) -> None:
        self.rates, self.noise = rates, noise
        self.measured: list[tuple[int, str, tuple[str, ...]]] = []
        self.rng = random.Random()

    def __call__(self, step: int, side: str, nodes: tuple[str, ...]) -> HalfResult:
        self.measured.append((step, side, nodes))
        busbw = min(self.rates[n] for n in nodes) * (1 + self.rng.uniform(-self.noise, self.noise))
        return HalfResult(nodes, f"run-b{step}-{side}", busbw, "all_reduce.v1:...", None)


@pytest.mark.parametrize("count", [2, 3, 5, 8, 16, 33])
def test_a_slow_node_is_named_in_about_log2_n_steps(count: int) -> None:
    nodes = [f"node{i:03d}" for i in range(count)]
    slow = random.choice(nodes)
    rates = {n: random.uniform(44.0, 46.0) for n in nodes}
    rates[slow] *= random.uniform(0.4, 0.8)  # 20 % to 60 % slower: beyond MIN_GAP and the noise
    halves_seen = FakeHalves(rates)
    found = bisect(nodes, halves_seen)
    assert found.slow_node == slow and not found.failed, found.text()
    assert len(found.steps) <= math.ceil(math.log2(count)) and len(halves_seen.measured) == 2 * len(found.steps)
    # each step halves the half kept the step before, and the kept half holds the slow node
    for before, after in zip(found.steps, found.steps[1:], strict=False):
        kept = before.halves[before.slower].nodes  # type: ignore[index]
        assert set(after.halves[0].nodes) | set(after.halves[1].nodes) == set(kept)
    assert slow in found.text() and f"slow node: {slow}" in found.verdict


def test_no_node_is_named_when_no_half_stands_out_or_a_half_stores_nothing() -> None:
    nodes = [f"n{i}" for i in range(8)]
    even = bisect(nodes, FakeHalves({n: 45.0 for n in nodes}, noise=0.0))
    assert even.slow_node is None and len(even.steps) == 1 and not even.failed
    assert "no node stands out" in even.verdict and even.steps[0].slower is None
    just = {n: 45.0 for n in nodes}
    just["n6"] = 45.0 * (1 - MIN_GAP / 2)  # below the others, within the gap: not followed
    assert bisect(nodes, FakeHalves(just, noise=0.0)).slow_node is None

    def broken(step: int, side: str, half: tuple[str, ...]) -> HalfResult:
        return HalfResult(half, f"r-{side}", None if side == "b" else 40.0, None, "srun ended with exit code 1")

    failed = bisect(nodes, broken)
    assert failed.failed and failed.slow_node is None and "n4, n5, n6, n7 stored no figure" in failed.verdict
    assert bisect(["only"], broken).steps == () and bisect(["only"], broken).slow_node is None


def test_halves_and_the_slower_half_known_answers() -> None:
    assert halves(["a", "b", "c", "d", "e"]) == (("a", "b"), ("c", "d", "e"))
    fast, slow = HalfResult(("a",), "r", 50.0), HalfResult(("b",), "r", 40.0)
    assert slower_half(fast, slow) == 1 and slower_half(slow, fast) == 0
    assert slower_half(fast, HalfResult(("b",), "r", 46.0)) is None  # 8 % below: within the 10 % gap
    assert slower_half(fast, HalfResult(("b",), "r", None)) is None


def test_each_half_is_an_srun_of_rooflab_collectives_on_its_nodes_into_a_run_of_its_own(tmp_path: Path) -> None:
    log = tmp_path / "srun.txt"
    recorder(tmp_path / "bin" / "srun", f'{{ printf "%s\\n" "$@"; echo "MASTER=$MASTER_ADDR:$MASTER_PORT"; '
                                        f'echo ---; }} >> {shlex.quote(str(log))}\nexit 0\n')
    read = {"night-b1-a": (40.0, "all_reduce.v1:k"), "night-b1-b": None}
    halves_run = SrunHalves(spec="/s/links.yaml", run_id="night", rooflab=("/venv/python", "-m", "rooflab"),
                            ops=("all_reduce",), ranks_per_node=2, device="cpu", port_base=20100,
                            read=lambda run, ops: read[run], address=lambda node: f"10.0.0.{node[-1]}",
                            environ={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "ROOFLAB_DB": "sqlite:////x.db"})
    a = halves_run(1, "a", ("n1", "n2"))
    b = halves_run(1, "b", ("n3",))
    assert (a.busbw_gbps, a.run_id, a.error) == (40.0, "night-b1-a", None)
    assert b.busbw_gbps is None and "stored no result" in str(b.error)
    calls = [c.strip("\n").split("\n") for c in log.read_text().split("---\n") if c.strip()]
    assert calls[0] == ["--kill-on-bad-exit=1", "--nodes=2", "--nodelist=n1,n2", "--ntasks=4", "--ntasks-per-node=2",
                        "/venv/python", "-m", "rooflab", "collectives", "/s/links.yaml", "--run-id", "night-b1-a",
                        "--device", "cpu", "--filter=op=all_reduce", "MASTER=10.0.0.1:20102"]
    assert calls[1][2] == "--nodelist=n3" and calls[1][-1] == "MASTER=10.0.0.3:20103"  # a port of its own


def test_the_links_spec_bisects_with_its_all_reduce_and_outside_an_allocation_is_refused() -> None:
    assert bisect_ops(expand(load_spec("links"), "cpu")) == ("all_reduce",)
    only_pairs = [c for c in expand(load_spec("links"), "cpu") if c.op == "sendrecv_pairs"]
    with pytest.raises(UserInputError, match="no collective to run on halves"):
        bisect_ops(only_pairs)
    with pytest.raises(UserInputError, match="inside a Slurm allocation"):
        allocation_nodes({})
