"""The halving search for a slow node, for when only the whole is slow (`rooflab bisect`, run by the
job `rooflab slurm SPEC --bisect` writes; docs/collectives.md, "Pairs or halves").

Runs the search of runners/cluster/halving.py over this allocation's nodes: `SrunHalves` runs
`srun ... rooflab collectives SPEC` on a half's nodes into a run of its own (`RUN_ID-bK-a` /
`-bK-b`) and reads the stored figure back from the database.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rooflab.db.query import results
from rooflab.runners.cluster.halving import MIN_GAP, MIN_NODES, SIDES, Bisection, HalfResult, bisect, too_few_nodes
from rooflab.runners.errors import UserInputError
from rooflab.suite.case import Case
from rooflab.suite.ops.pairs import is_pairs
from rooflab.suite.spec import expand, load_spec
from rooflab.vocab import ResultStatus


def bisect_ops(cases: Sequence[Case]) -> tuple[str, ...]:
    """The ops a bisection runs: the spec's collectives other than the matrices of pairs."""
    ops = tuple(dict.fromkeys(c.op for c in cases if c.family == "collective" and not is_pairs(c)))
    if not ops:
        raise UserInputError("the spec has no collective to run on halves of the nodes (besides its matrices of "
                             "pairs): add one, e.g. an all_reduce with ranks: all (the links spec has one)")
    return ops


@dataclass(frozen=True)
class SrunHalves:
    """A `Measure` inside a Slurm allocation: `srun` starts `rooflab collectives SPEC` on a half's
    nodes (`ranks_per_node` tasks each) into the run `RUN_ID-bK-SIDE`; its figure is read back."""

    spec: str
    run_id: str
    rooflab: tuple[str, ...]
    ops: tuple[str, ...]
    ranks_per_node: int
    device: str
    port_base: int
    read: Callable[[str, tuple[str, ...]], tuple[float, str] | None]  # (run id, ops) -> (busbw, case key)
    address: Callable[[str], str]  # a node's address (its NodeAddr)
    environ: Mapping[str, str]

    def __call__(self, step: int, side: str, nodes: tuple[str, ...]) -> HalfResult:
        run = f"{self.run_id}-b{step}-{side}"
        # --ntasks too: inside the allocation srun would take the whole job's task count for the half
        command = ["srun", "--kill-on-bad-exit=1", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
                   f"--ntasks={len(nodes) * self.ranks_per_node}", f"--ntasks-per-node={self.ranks_per_node}",
                   *self.rooflab, "collectives", self.spec, "--run-id", run, "--device", self.device,
                   *(f"--filter=op={op}" for op in self.ops)]
        port = self.port_base + 2 * step + SIDES.index(side)
        env = {**self.environ, "MASTER_ADDR": self.address(nodes[0]), "MASTER_PORT": str(port)}
        code = subprocess.run(command, env=env, check=False).returncode
        figure = self.read(run, self.ops)
        if figure is None:
            return HalfResult(nodes, run, None, None, f"srun ended with exit code {code} and stored no result")
        return HalfResult(nodes, run, figure[0], figure[1], None if code == 0 else f"srun exit code {code}")


def allocation_nodes(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The nodes of this Slurm allocation (`scontrol show hostnames $SLURM_JOB_NODELIST`)."""
    env = os.environ if environ is None else environ
    nodelist = env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise UserInputError("rooflab bisect runs inside a Slurm allocation (SLURM_JOB_NODELIST is not set): submit "
                             "the script `rooflab slurm SPEC --bisect` writes")
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return tuple(line.strip() for line in out.stdout.splitlines() if line.strip())


def node_address(node: str) -> str:
    """The address Slurm reaches `node` by (its NodeAddr), else its name."""
    out = subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True, check=False).stdout
    for word in out.split():
        if word.startswith("NodeAddr="):
            return word.split("=", 1)[1] or node
    return node


def stored_figure(db: str) -> Callable[[str, tuple[str, ...]], tuple[float, str] | None]:
    """A `read` for SrunHalves: the bus bandwidth of a run's ok result of one of `ops` at its
    largest bytes, and its case key (None when the run holds none)."""
    def read(run_id: str, ops: tuple[str, ...]) -> tuple[float, str] | None:
        rows = results(db, run_id=run_id, status=ResultStatus.OK, columns=["case_key", "op", "bytes", "gbps"])
        rows = rows[rows["op"].isin(ops) & rows["gbps"].notna()]
        if rows.empty:
            return None
        best = rows.sort_values("bytes").iloc[-1]
        return float(best["gbps"]), str(best["case_key"])

    return read


def run_bisection(spec_path: str, *, db: str, run_id: str, ranks_per_node: int, device: str,
                  min_gap: float = MIN_GAP, out: Path | None = None) -> Bisection:
    """`rooflab bisect`: the search over this allocation's nodes, written to `out` as JSON."""
    if ranks_per_node < 1:
        raise UserInputError(f"--ranks-per-node {ranks_per_node}: at least 1 (a half of one node needs 2 or more)")
    if not 0 < min_gap < 1:
        raise UserInputError(f"--min-gap {min_gap}: a share between 0 and 1 (e.g. 0.1: 10 % below the faster half)")
    spec = load_spec(spec_path)
    ops = bisect_ops(expand(spec))  # of every device kind: the spec names the same collective for both
    nodes = allocation_nodes()
    if len(nodes) < MIN_NODES:
        raise UserInputError(too_few_nodes(len(nodes)))
    job = int(os.environ.get("SLURM_JOB_ID", "0") or 0)
    measure = SrunHalves(spec=str(spec.path), run_id=run_id, rooflab=(sys.executable, "-m", "rooflab"), ops=ops,
                         ranks_per_node=ranks_per_node, device=device, port_base=20000 + job % 20000,
                         read=stored_figure(db), address=node_address, environ=dict(os.environ, ROOFLAB_DB=db))
    found = bisect(nodes, measure, min_gap)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(found.to_dict(), indent=2) + "\n")
    return found
