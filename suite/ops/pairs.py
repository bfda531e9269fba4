"""The link matrix: every pair of a group's ranks sends to the other, pair by pair (`sendrecv_pairs`).

A case of this op is one matrix: for a group of N ranks (`ranks: all`: the GPUs of a node, over
NVLink or PCIe; under Slurm one rank per node, over the network; 4 ranks on a CPU, over loopback:
CPU_PAIR_RANKS) every unordered pair (a, b), a
the lower rank, sends `n` elements in its `direction` (a_to_b, b_to_a, or both at once), timed as
the other collectives are (stream or isolated, runners/engine/pair_timing.py). The pairs are
measured in rounds of disjoint pairs that run at the same time (`round_robin`, the circle method:
N-1 rounds of N/2 pairs for an even N, N rounds of (N-1)/2 for an odd N). Concurrent pairs share
switches, NICs and, on a CPU, cores: `pairs_at_once` cuts each round into rounds of at most that
many pairs (1: one pair at a time, N(N-1)/2 rounds), a different measurement, in the case key.

Every pair is a result of its own, stored under the matrix case with both ends added to its params
(`PairEnds`: each end's rank, host and device key), so a pair's series is that pair of physical
devices, and the judgement of the matrix can hold each pair against its siblings. `matrix_key`
gives a pair's matrix case key back (what a resumed run holds).

The work model is nccl-tests' sendrecv's: S = n·s, the bytes one end sends, and busbw = algbw = S / t
(factor 1); both at once moves S each way in the same t, so its rate is per direction, as
nccl-tests' sendrecv counts it. No FLOPs. Each end allocates a send and a receive buffer of n
elements; the receiving end checks every element against the sender's seeded input.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from rooflab.suite.case import COLLECTIVE, Case, ParamValue, canonical_params
from rooflab.suite.device import DeviceInfo
from rooflab.suite.dtypes import torch_dtype
from rooflab.suite.lazy import torch
from rooflab.suite.ops.base import Params, ParamSpec
from rooflab.suite.ops.collective import (
    ALL,
    CollectiveOp,
    Group,
    PreparedCollective,
    RanksSpec,
)
from rooflab.suite.ops.collective_data import check_exact, input_of
from rooflab.suite.ops.registry import all_ops, register
from rooflab.vocab import PairDirection

PAIRS_OP = "sendrecv_pairs"
CPU_PAIR_RANKS = 4  # `ranks: all` on a CPU: 4 rank processes, 6 pairs in 3 rounds of 2
Pair = tuple[int, int]  # (a, b), a < b: two ranks
Round = tuple[Pair, ...]  # disjoint pairs measured at the same time
_REST = -1  # the place of an odd group's round-robin that pairs a rank with no one (it rests that round)


def round_robin(size: int) -> tuple[Round, ...]:
    """Every unordered pair of `size` ranks once, in rounds of disjoint pairs (the circle method:
    rank 0 stays, the others turn one place a round; an odd group gets a resting place)."""
    if size < 2:
        raise ValueError(f"a pair needs 2 ranks, the group has {size}")
    places = [*range(size), *([_REST] if size % 2 else [])]
    count = len(places)
    rounds = []
    for _ in range(count - 1):
        pairs = [(places[i], places[count - 1 - i]) for i in range(count // 2)]
        rounds.append(tuple(sorted((min(p), max(p)) for p in pairs if _REST not in p)))
        places = [places[0], places[-1], *places[1:-1]]
    return tuple(rounds)


def schedule(size: int, pairs_at_once: ParamValue = ALL) -> tuple[Round, ...]:
    """The rounds of a matrix of `size` ranks: the round-robin's, each cut into rounds of at most
    `pairs_at_once` pairs (ALL: as they are)."""
    rounds = round_robin(size)
    if pairs_at_once == ALL:
        return rounds
    k = int(pairs_at_once)
    return tuple(r[i:i + k] for r in rounds for i in range(0, len(r), k))


@dataclass(frozen=True)
class PairEnds:
    """Both ends of one pair: each end's rank, host and device key (the GPU's UUID, else the
    device's fingerprint), as a pair's result carries them in its params (END_PARAMS)."""

    a_rank: int
    a_host: str
    a_device: str
    b_rank: int
    b_host: str
    b_device: str

    def __post_init__(self) -> None:
        if not self.a_rank < self.b_rank:
            raise ValueError(f"a pair's end a is its lower rank: got a {self.a_rank}, b {self.b_rank}")
        for name in ("a_host", "a_device", "b_host", "b_device"):
            text = getattr(self, name)
            if not text or any(c in text for c in ",=: "):
                raise ValueError(f"{name} {text!r}: an end's host and device key are words without , = : or spaces")

    def params(self) -> dict[str, ParamValue]:
        return {name: getattr(self, name) for name in END_PARAMS}


END_PARAMS = ("a_rank", "a_host", "a_device", "b_rank", "b_host", "b_device")


def pair_case(case: Case, ends: PairEnds) -> Case:
    """The case one pair of `case`'s matrix is stored under: its params and both ends."""
    return replace(case, params={**case.params, **ends.params()})


def ends_of(params: Params) -> PairEnds | None:
    """The ends a pair's params name, or None (a matrix case, or another op's)."""
    if not all(name in params for name in END_PARAMS):
        return None
    return PairEnds(a_rank=int(params["a_rank"]), a_host=str(params["a_host"]), a_device=str(params["a_device"]),
                    b_rank=int(params["b_rank"]), b_host=str(params["b_host"]), b_device=str(params["b_device"]))


def pair_of_key(case_key: str) -> tuple[str, PairEnds] | None:
    """(the key of the matrix case a pair's result belongs to, the pair's ends), read from a pair's
    case key, or None for a key that is not a pair's. A key's params are its last `:` field,
    `name=value` pairs in name order (suite.case.canonical_params); an end's values hold no `,`, `=`
    or `:` (PairEnds)."""
    head, _, params_text = case_key.rpartition(":")
    if not params_text or not is_pairs_op(head.split(":", 1)[0].rpartition(".v")[0]):
        return None
    params = dict(part.split("=", 1) for part in params_text.split(",") if "=" in part)
    ends = ends_of(params)
    if ends is None:
        return None
    return f"{head}:{canonical_params({k: v for k, v in params.items() if k not in END_PARAMS})}", ends


def matrix_key(case_key: str) -> str | None:
    """The key of the matrix case a pair's result belongs to (its ends taken out of its key), or
    None for a key that is not a pair's (`pair_of_key`)."""
    found = pair_of_key(case_key)
    return found[0] if found is not None else None


def held_keys(stored: Iterable[str]) -> set[str]:
    """The case keys a run holds, from the keys of its stored results: each result's own, and the
    matrix case whose every pair's result is stored (a matrix is stored as its pairs' results; one
    cut short, a Slurm step killed in its middle, is measured again, its stored pairs kept). A
    matrix of n ranks has n(n-1)/2 pairs; n is its highest rank + 1, which its first round holds."""
    keys = set(stored)
    pairs: dict[str, set[tuple[int, int]]] = {}
    for key in keys:
        found = pair_of_key(key)
        if found is not None:
            pairs.setdefault(found[0], set()).add((found[1].a_rank, found[1].b_rank))
    whole = {m for m, ends in pairs.items() if len(ends) == _pair_count(1 + max(b for _, b in ends))}
    return keys | whole


def _pair_count(ranks: int) -> int:
    return ranks * (ranks - 1) // 2


PAIRS_AT_ONCE = RanksSpec(int, ALL, "pairs measured at once: all (a round-robin round, N/2 pairs) or at most this "
                          "many (1: one pair at a time)", least=1)


def with_pairs_at_once(cases: Sequence[Case], pairs_at_once: str) -> list[Case]:
    """`cases` with every matrix measured `pairs_at_once` pairs at a time (`--pairs-at-once`: all, or
    a whole number >= 1; ParamValueError otherwise); the other cases as they are, none twice."""
    value = PAIRS_AT_ONCE.check(int(pairs_at_once) if pairs_at_once.strip().isdigit() else pairs_at_once,
                                "--pairs-at-once", PAIRS_OP)
    out = [replace(c, params={**c.params, "pairs_at_once": value}) if is_pairs(c) else c for c in cases]
    return list({c.case_key: c for c in out}.values())


@dataclass
class PairCall:
    """This rank's part of one round: its pair, the call it makes (send, receive, or both), a
    `clear` of its receive buffer before the round, and the check of what it received (None when
    it only sends)."""

    pair: Pair
    fn: Callable[[], Any]
    clear: Callable[[], Any]
    check: Callable[[], str | None] | None


@dataclass
class PreparedPairs(PreparedCollective):
    """A matrix ready to time on one rank: its rounds and, per round, this rank's call (None when it
    rests that round). `fn` and `check` are its first round's (a rank that rests there: no call)."""

    rounds: tuple[Round, ...] = ()
    calls: tuple[PairCall | None, ...] = field(default_factory=tuple)


def no_call() -> None:
    """A resting rank's part of a round: nothing (it joins the round's barriers and gathers only)."""


class SendRecvPairs(CollectiveOp):
    """Every pair of the group, in rounds of disjoint pairs; see the module docstring."""

    name = PAIRS_OP
    cpu_all_ranks = CPU_PAIR_RANKS
    params: ClassVar[dict[str, ParamSpec]] = {
        **CollectiveOp.params,
        "direction": ParamSpec(str, PairDirection.BOTH.value,
                               "which way each pair sends: a_to_b, b_to_a (a the lower rank) or both at once",
                               choices=tuple(d.value for d in PairDirection), positive=False),
        "pairs_at_once": PAIRS_AT_ONCE,
    }

    def factor(self, ranks: int) -> float:
        return 1.0

    def buffer_elements(self, n: int, ranks: int, params: Params) -> int:
        return 2 * n  # the rank's own input, sent, and the buffer it receives into

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedPairs:
        n, direction = int(p["n"]), PairDirection(str(p["direction"]))
        x = self.inputs(n, case, device, seed, group)
        y = torch.zeros(n, dtype=torch_dtype(case.dtype), device=device.torch_device)
        rounds = schedule(group.size, p["pairs_at_once"])
        calls = tuple(self._call(r, group, direction, x, y, seed, device) for r in rounds)
        first = calls[0]
        return PreparedPairs(fn=first.fn if first else no_call, check=lambda out: None, graph_safe=False,
                             rounds=rounds, calls=calls)

    def _call(self, pairs: Round, group: Group, direction: PairDirection, x: torch.Tensor, y: torch.Tensor,
              seed: int, device: DeviceInfo) -> PairCall | None:
        """This rank's call in a round of `pairs` (None when it is in none of them)."""
        pair = next((p for p in pairs if group.rank in p), None)
        if pair is None:
            return None
        a, b = pair
        peer = b if group.rank == a else a
        sends = direction is PairDirection.BOTH or (direction is PairDirection.A_TO_B) == (group.rank == a)
        receives = direction is PairDirection.BOTH or not sends
        import torch.distributed as dist

        ops = ([(dist.isend, x)] if sends else []) + ([(dist.irecv, y)] if receives else [])

        def fn() -> Any:
            for work in dist.batch_isend_irecv([dist.P2POp(op, buffer, peer) for op, buffer in ops]):
                work.wait()
            return y

        check = None
        if receives:
            expected = input_of(seed, peer, group.size, 0, device.torch_device)
            what = f"rank {group.rank} of {group.size}: {self.name} from rank {peer}"
            check = lambda: check_exact(y, expected, what)  # noqa: E731 - the receiver's check of this round
        return PairCall(pair, fn, y.zero_, check)



def is_pairs_op(name: str) -> bool:
    """The op `name` measures a matrix of pairs (sendrecv_pairs, or an op built on it)."""
    return isinstance(all_ops().get(name), SendRecvPairs)


def is_pairs(case: Case) -> bool:
    """A case of the link matrix (a matrix, or one pair of it)."""
    return case.family == COLLECTIVE and is_pairs_op(case.op)


register(SendRecvPairs)
