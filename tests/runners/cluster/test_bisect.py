"""The halving search for a slow node (runners/cluster/halving.py, run by runners/cluster/bisect.py)
over fake halves: halves of the same size and at least two nodes, made up with cleared nodes; it names
a planted slow node (slow on its NIC: on its own it is as fast as any) in at most ceil(log2 N) steps
whatever N and wherever the node is, the odd node set aside included; names none when no half stands
out; stops when a half stores nothing; refuses fewer than 4 nodes; the srun command each half runs;
outside an allocation, exit 2."""
from __future__ import annotations

import math
import random
import shlex
from pathlib import Path

import pytest

from rooflab.runners.cluster.bisect import SrunHalves, allocation_nodes, bisect_ops
from rooflab.runners.cluster.halving import (
    MIN_GAP,
    MIN_HALF_NODES,
    HalfResult,
    StepPlan,
    bisect,
    halves,
    plan_step,
    slower_half,
)
from rooflab.runners.errors import UserInputError
from rooflab.suite.spec import expand, load_spec
from tests.runners.cluster.test_slurm import recorder

OWN_LINKS_GBPS = 300.0  # a node's collective over its own links (NVLink): the same on every node


class FakeHalves:
    """A half's all_reduce: over the network (two nodes or more) a ring's busbw is its slowest node's
    NIC rate (a slow node sets the ring's pace), with a few per cent of noise; one node alone runs it
    over its own links, which do not go through its NIC. Each half measured is kept."""

    def __init__(self, rates: dict[str, float], noise: float = 0.03) -> None:
        self.rates, self.noise = rates, noise
        self.measured: list[tuple[int, str, tuple[str, ...]]] = []
        self.rng = random.Random()

    def __call__(self, step: int, side: str, nodes: tuple[str, ...]) -> HalfResult:
        self.measured.append((step, side, nodes))
        assert len(set(nodes)) == len(nodes), nodes
        rate = min(self.rates[n] for n in nodes) if len(nodes) > 1 else OWN_LINKS_GBPS
        busbw = rate * (1 + self.rng.uniform(-self.noise, self.noise))
        return HalfResult(nodes, f"run-b{step}-{side}", busbw, "all_reduce.v1:...", None)


@pytest.mark.parametrize("count", [4, 5, 6, 7, 8, 9, 16, 33])
def test_a_node_slow_on_its_nic_is_named_in_at_most_log2_n_steps(count: int) -> None:
    nodes = [f"node{i:03d}" for i in range(count)]
    slow = random.choice(nodes)
    rates = {n: random.uniform(44.0, 46.0) for n in nodes}
    rates[slow] *= random.uniform(0.4, 0.8)  # 20 % to 60 % slower: beyond MIN_GAP and the noise
    halves_seen = FakeHalves(rates)
    found = bisect(nodes, halves_seen)
    assert found.slow_node == slow and not found.failed, found.text()
    assert len(found.steps) <= math.ceil(math.log2(count)) and len(halves_seen.measured) == 2 * len(found.steps)
    for s in found.steps:  # both halves cross the network, and compare as equals: the same number of nodes
        a, b = (h.nodes for h in s.halves)
        assert len(a) == len(b) >= MIN_HALF_NODES, found.text()
    cleared: set[str] = set()
    for before, after in zip(found.steps, found.steps[1:], strict=False):
        suspects = set(after.suspects[0]) | set(after.suspects[1])
        if before.slower is not None:  # the next step splits the group kept
            kept = before.suspects[before.slower]
            assert suspects == set(kept) and slow in kept
            cleared |= set(before.suspects[1 - before.slower])
        else:  # no half stood out: the node set aside is measured with cleared nodes
            cleared |= set(before.suspects[0]) | set(before.suspects[1])
            assert suspects == {slow} and slow not in cleared
        made_up = (set(after.halves[0].nodes) | set(after.halves[1].nodes)) - suspects
        assert made_up <= cleared and slow not in made_up, found.text()
    assert slow in found.text() and f"slow node: {slow}" in found.verdict


def test_the_node_set_aside_is_named_when_it_is_the_slow_one() -> None:
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    rates = dict.fromkeys(nodes, 45.0) | {"n5": 30.0}
    found = bisect(nodes, FakeHalves(rates, noise=0.0))
    assert found.slow_node == "n5" and len(found.steps) == 2, found.text()
    first, second = found.steps
    assert first.suspects == (("n1", "n2"), ("n3", "n4")) and first.slower is None
    assert second.suspects == ((), ("n5",)) and second.slower == 1
    assert [h.nodes for h in second.halves] == [("n1", "n2"), ("n5", "n1")]
    assert "half b (n5 + cleared n1)" in found.text()


def test_no_node_is_named_when_no_half_stands_out_or_a_half_stores_nothing() -> None:
    nodes = [f"n{i}" for i in range(8)]
    even = bisect(nodes, FakeHalves(dict.fromkeys(nodes, 45.0), noise=0.0))
    assert even.slow_node is None and len(even.steps) == 1 and not even.failed
    assert "no node stands out" in even.verdict and even.steps[0].slower is None
    just = dict.fromkeys(nodes, 45.0)
    just["n6"] = 45.0 * (1 - MIN_GAP / 2)  # below the others, within the gap: not followed
    assert bisect(nodes, FakeHalves(just, noise=0.0)).slow_node is None
    odd = [*nodes, "n8"]  # the node set aside is no slower either: two steps, no node
    alike = bisect(odd, FakeHalves(dict.fromkeys(odd, 45.0), noise=0.0))
    assert alike.slow_node is None and len(alike.steps) == 2 and "among n8" in alike.verdict

    def broken(step: int, side: str, half: tuple[str, ...]) -> HalfResult:
        return HalfResult(half, f"r-{side}", None if side == "b" else 40.0, None, "srun ended with exit code 1")

    failed = bisect(nodes, broken)
    assert failed.failed and failed.slow_node is None and "n4, n5, n6, n7 stored no figure" in failed.verdict


@pytest.mark.parametrize("count", [1, 2, 3])
def test_fewer_than_four_nodes_are_not_bisected(count: int) -> None:
    """Two halves of two nodes or more are needed at the first step: with three nodes a half would be
    one node, whose collective runs over its own links."""
    with pytest.raises(ValueError, match="4 nodes or more"):
        bisect([f"n{i}" for i in range(count)], FakeHalves({}))


def test_halves_and_the_slower_half_known_answers() -> None:
    assert halves(["a", "b", "c", "d", "e"]) == (("a", "b"), ("c", "d", "e"))
    fast, slow = HalfResult(("a",), "r", 50.0), HalfResult(("b",), "r", 40.0)
    assert slower_half(fast, slow) == 1 and slower_half(slow, fast) == 0
    assert slower_half(fast, HalfResult(("b",), "r", 46.0)) is None  # 8 % below: within the 10 % gap
    assert slower_half(fast, HalfResult(("b",), "r", None)) is None
    # the first step: nothing cleared, the odd node out set aside; later steps: made up with cleared nodes
    five = ("a", "b", "c", "d", "e")
    assert plan_step(five, ()) == StepPlan((("a", "b"), ("c", "d")), (("a", "b"), ("c", "d")), "e")
    assert plan_step(("x", "y"), ("c1", "c2")).halves == (("x", "c1"), ("y", "c1"))
    assert plan_step(("x", "y", "z"), ("c1", "c2")).halves == (("x", "c1"), ("y", "z"))
    assert plan_step(("x",), ("c1", "c2")).halves == (("c1", "c2"), ("x", "c1"))
    assert plan_step(("a", "b", "c", "d", "e", "f"), ()).halves == (("a", "b", "c"), ("d", "e", "f"))


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


def test_rooflab_bisect_in_an_allocation_of_three_nodes_exits_2_and_runs_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from rooflab.runners.cli.app import app

    srun = tmp_path / "srun.txt"
    recorder(tmp_path / "bin" / "scontrol", 'printf "n1\\nn2\\nn3\\n"\n')
    recorder(tmp_path / "bin" / "srun", f"touch {shlex.quote(str(srun))}\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-3]")
    done = CliRunner().invoke(app, ["bisect", "links", "--run-id", "b", "--db", f"sqlite:///{tmp_path / 'r.db'}"])
    assert done.exit_code == 2 and "3 node(s): a bisection needs 4 or more" in done.output, done.output
    assert "Traceback" not in done.output and not srun.exists()
