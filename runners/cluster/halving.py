"""The halving search for a slow node, pure (runners/cluster/bisect.py runs it in a Slurm allocation:
`rooflab bisect`, the job `rooflab slurm SPEC --bisect` writes; docs/collectives.md, "Pairs or halves").

With the nodes of a Slurm allocation as the candidates, each step splits them in two groups, runs the
spec's collective (its cases other than the matrices of pairs; the links spec's all_reduce) on each
half, one after the other, and keeps the group whose half has the lower bus bandwidth; after about
log2(N) steps one node is left: the slow one.

Both halves of a step have the same number of nodes, and at least MIN_HALF_NODES: a half of one node
would run its collective over that node's own links (NVLink, or shared memory), not over its NIC, and
its figure would not be comparable with a half that crosses the network. So a group smaller than its
half is made up with cleared nodes (nodes of a faster half before: fine), which is why the search
needs MIN_NODES nodes: the first step has none cleared. An odd node out at the first step is set
aside; when neither half stands out, it is measured last, with cleared nodes, against a half of
cleared nodes alone.

A step where neither half is below the other by MIN_GAP of the faster half's figure stops the search:
no node stands out (the whole is slow alike, or the figures are within their noise), and the pair
matrix is the measurement to take next. A half that stores no figure stops it too (exit code 1).

`bisect` is the search over a `measure` callable (a test's fake, or bisect.py's `SrunHalves`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

MIN_GAP = 0.10  # the slower half's busbw at least this share below the faster half's, else no half stands out
MIN_HALF_NODES = 2  # a half of fewer nodes would not cross the network
MIN_NODES = 2 * MIN_HALF_NODES  # the first step's halves have no cleared node to make them up
SIDES = ("a", "b")


@dataclass(frozen=True)
class HalfResult:
    """One half's collective: its nodes, the run it was stored in, its bus bandwidth (None: no figure,
    and why)."""

    nodes: tuple[str, ...]
    run_id: str
    busbw_gbps: float | None
    case_key: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class BisectStep:
    step: int  # 1, 2, ...
    halves: tuple[HalfResult, HalfResult]
    slower: int | None  # index of the slower half; None: no half stands out, or a half has no figure
    suspects: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # each half's candidates (its other nodes: cleared)


@dataclass(frozen=True)
class Bisection:
    """The search: its nodes, its steps, the node it names (None when it names none) and why."""

    nodes: tuple[str, ...]
    steps: tuple[BisectStep, ...]
    slow_node: str | None
    verdict: str
    failed: bool = False  # a half stored no figure

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def text(self) -> str:
        lines = [f"bisection over {len(self.nodes)} nodes: {', '.join(self.nodes)}"]
        for s in self.steps:
            for i, half in enumerate(s.halves):
                figure = f"{half.busbw_gbps:.4g} GB/s" if half.busbw_gbps is not None else f"no figure ({half.error})"
                mark = "  <- slower" if s.slower == i else ""
                cleared = [n for n in half.nodes if n not in s.suspects[i]]
                nodes = ", ".join(s.suspects[i]) or "none"
                made_up = f" + cleared {', '.join(cleared)}" if cleared else ""
                lines.append(f"  step {s.step} half {SIDES[i]} ({nodes}{made_up}): {figure}{mark}")
        lines.append(self.verdict)
        return "\n".join(lines)


Measure = Callable[[int, str, tuple[str, ...]], HalfResult]  # (step, side, nodes) -> the half's result


def halves(nodes: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The two groups of `nodes` (the second holds the odd one)."""
    k = len(nodes) // 2
    return tuple(nodes[:k]), tuple(nodes[k:])


def slower_half(a: HalfResult, b: HalfResult, min_gap: float = MIN_GAP) -> int | None:
    """0 or 1, the half whose busbw is below the other's by at least `min_gap` of the faster one's;
    None when neither is, or a half has no figure."""
    if a.busbw_gbps is None or b.busbw_gbps is None:
        return None
    low, high = sorted((a.busbw_gbps, b.busbw_gbps))
    if low > (1 - min_gap) * high:
        return None
    return 0 if a.busbw_gbps == low else 1


@dataclass(frozen=True)
class StepPlan:
    """One step: each half's candidates, each half's nodes (the candidates made up with cleared
    nodes to the same size, at least MIN_HALF_NODES) and the node set aside (an odd one out at the
    first step, when no node is cleared yet)."""

    groups: tuple[tuple[str, ...], tuple[str, ...]]
    halves: tuple[tuple[str, ...], tuple[str, ...]]
    aside: str | None = None


def plan_step(candidates: Sequence[str], cleared: Sequence[str]) -> StepPlan:
    """The halves of a step over `candidates` (one candidate: it against cleared nodes alone), made
    up from `cleared`; the two halves run one after the other, so a cleared node may be in both."""
    first, second = halves(candidates)
    size = max(MIN_HALF_NODES, len(first), len(second))
    aside = None
    if size - min(len(first), len(second)) > len(cleared):  # the first step: nothing cleared to make up with
        aside, (first, second) = candidates[-1], halves(candidates[:-1])
        size = len(second)
        if len(first) < MIN_HALF_NODES or len(first) != len(second):
            raise ValueError(f"{len(candidates)} candidates and {len(cleared)} cleared nodes: no two halves of "
                             f"{MIN_HALF_NODES} nodes or more")
    pad = [n for n in cleared if n not in candidates]
    return StepPlan((first, second), (first + tuple(pad[:size - len(first)]), second + tuple(pad[:size - len(second)])),
                    aside)


def bisect(nodes: Sequence[str], measure: Measure, min_gap: float = MIN_GAP) -> Bisection:
    """Halve `nodes` until one is left, keeping the slower half's group each step (the module
    docstring); MIN_NODES nodes or more."""
    if len(nodes) < MIN_NODES:
        raise ValueError(f"a bisection needs {MIN_NODES} nodes or more, not {len(nodes)}")
    candidates, steps = tuple(nodes), list[BisectStep]()
    cleared: tuple[str, ...] = ()
    measured_alone = True  # the candidates were in a half of their own against another (not only set aside)
    while len(candidates) > 1 or not measured_alone:
        plan = plan_step(candidates, cleared)
        step = len(steps) + 1
        measured = (measure(step, SIDES[0], plan.halves[0]), measure(step, SIDES[1], plan.halves[1]))
        slower = slower_half(*measured, min_gap=min_gap)
        steps.append(BisectStep(step, measured, slower, plan.groups))
        missing = next((r for r in measured if r.busbw_gbps is None), None)
        if missing is not None:
            return Bisection(tuple(nodes), tuple(steps), None,
                             f"step {step}: the half on {', '.join(missing.nodes)} stored no figure: {missing.error}",
                             failed=True)
        if slower is None and plan.aside is not None:
            # every node measured is fine alike: the one set aside is left, to be measured with them
            candidates, cleared, measured_alone = (plan.aside,), plan.groups[0] + plan.groups[1], False
            continue
        if slower is None or not plan.groups[slower]:
            among = ", ".join(candidates)
            return Bisection(tuple(nodes), tuple(steps), None,
                             f"step {step}: neither half is {100 * min_gap:g} % below the other: no node stands out "
                             f"among {among} (measure the pairs of nodes)" if slower is None else
                             f"step {step}: the half of cleared nodes alone is the slower: no node stands out among "
                             f"{among} (measure the pairs of nodes)")
        cleared = tuple(dict.fromkeys((*cleared, *plan.groups[1 - slower])))
        candidates, measured_alone = plan.groups[slower], True
    count = f"{len(steps)} step" + ("s" if len(steps) > 1 else "")
    return Bisection(tuple(nodes), tuple(steps), candidates[0],
                     f"slow node: {candidates[0]} ({count} over {len(nodes)} nodes)")


def too_few_nodes(count: int) -> str:
    """Why `count` nodes cannot be bisected, and what to measure instead."""
    return (f"{count} node(s): a bisection needs {MIN_NODES} or more (two halves of {MIN_HALF_NODES} nodes or more, "
            "so that each half's collective crosses the network, not one node's own links); with fewer, measure "
            "the pairs of nodes (rooflab slurm SPEC --links)")
