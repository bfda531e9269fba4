"""The link matrix's pure parts: the round-robin schedule, the pairs at once, both ends in a pair's
params and the matrix's key read back from a pair's (what a resumed run holds)."""
from __future__ import annotations

import random
import string
from itertools import combinations

import pytest

from rooflab.suite.case import Case, ParamValue
from rooflab.suite.ops.base import ParamValueError
from rooflab.suite.ops.pairs import (
    END_PARAMS,
    PAIRS_OP,
    PairEnds,
    ends_of,
    held_keys,
    matrix_key,
    pair_case,
    pair_of_key,
    round_robin,
    schedule,
    with_pairs_at_once,
)
from rooflab.suite.ops.registry import get_op


@pytest.mark.parametrize("size", [2, 3, 4, 5, 7, 8, 16, 23])
def test_the_round_robin_measures_every_pair_once_in_rounds_of_disjoint_pairs(size: int) -> None:
    rounds = round_robin(size)
    # N-1 rounds of N/2 pairs for an even group; N rounds of (N-1)/2 for an odd one (a rank rests)
    assert len(rounds) == (size - 1 if size % 2 == 0 else size)
    assert all(len(r) == size // 2 for r in rounds)
    for r in rounds:
        ranks = [rank for pair in r for rank in pair]
        assert len(ranks) == len(set(ranks)), f"a rank twice in one round: {r}"
        assert all(a < b for a, b in r)
    pairs = [pair for r in rounds for pair in r]
    assert sorted(pairs) == list(combinations(range(size), 2))


def test_pairs_at_once_cuts_each_round_and_keeps_every_pair_once() -> None:
    size = random.choice([6, 8, 10])
    whole = [pair for r in round_robin(size) for pair in r]
    assert schedule(size) == round_robin(size) == schedule(size, "all")
    one = schedule(size, 1)
    assert len(one) == size * (size - 1) // 2 and [r[0] for r in one] == whole
    two = schedule(size, 2)
    assert all(len(r) <= 2 for r in two) and [p for r in two for p in r] == whole
    with pytest.raises(ValueError, match="a pair needs 2 ranks"):
        round_robin(1)


def _word(k: int = 8) -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits + "-.", k=k)).strip("-.") or "x"


def _matrix() -> Case:
    op = get_op(PAIRS_OP)
    ranks: ParamValue = random.choice((4, 8, "all"))
    params = op.resolved_params({"n": random.randint(1, 1 << 20), "ranks": ranks,
                                 "direction": random.choice(["a_to_b", "b_to_a", "both"])})
    return Case(PAIRS_OP, op.version, "collective", "nccl", "float32", "hot", "launch", params=params)


def test_a_pairs_result_carries_both_ends_and_its_key_gives_the_matrix_back() -> None:
    matrix = _matrix()
    a, b = sorted(random.sample(range(64), 2))
    ends = PairEnds(a_rank=a, a_host=_word(), a_device=f"GPU-{random.getrandbits(64):016x}",
                    b_rank=b, b_host=_word(), b_device=f"{random.getrandbits(64):016x}")
    pair = pair_case(matrix, ends)
    assert pair.op == matrix.op and pair.collective_mode == matrix.collective_mode
    assert {k: pair.params[k] for k in END_PARAMS} == ends.params() and ends_of(pair.params) == ends
    assert ends_of(matrix.params) is None
    assert pair.case_key != matrix.case_key and matrix_key(pair.case_key) == matrix.case_key
    assert pair_of_key(pair.case_key) == (matrix.case_key, ends)
    assert matrix_key(matrix.case_key) is None  # a matrix's own key names no ends
    assert matrix_key("send_recv.v1:nccl:float32:hot:launch:n=4,ranks=2") is None
    # what a run holds: its results' own keys, and the matrix whose every pair is stored: of four
    # ranks, six pairs; five of them (a Slurm step killed before its last round) hold no matrix
    other = "all_reduce.v1:gloo:float32:hot:launch:n=4,ranks=2,reduce_op=sum"
    four = [pair_case(matrix, PairEnds(a_rank=i, a_host="n1", a_device=f"d{i}", b_rank=j, b_host="n1",
                                       b_device=f"d{j}")).case_key for i in range(4) for j in range(i + 1, 4)]
    assert held_keys([*four, other]) == {*four, other, matrix.case_key}
    assert matrix.case_key not in held_keys(four[:-1]) and held_keys(four[:-1]) == set(four[:-1])
    assert held_keys([*four[:-1], matrix.case_key]) == {*four[:-1], matrix.case_key}  # one that broke: its record
    assert matrix.case_key not in held_keys([four[2]])  # the pair 0-3 alone: one of six


def test_an_ends_words_and_order_are_checked() -> None:
    with pytest.raises(ValueError, match="lower rank"):
        PairEnds(a_rank=3, a_host="n1", a_device="d1", b_rank=1, b_host="n2", b_device="d2")
    for bad in ("a,b", "k=v", "host:1", "two words", ""):
        with pytest.raises(ValueError, match="without , = : or spaces"):
            PairEnds(a_rank=0, a_host=bad, a_device="d1", b_rank=1, b_host="n2", b_device="d2")


def test_pairs_at_once_from_the_command_line_changes_the_matrices_only() -> None:
    matrix = _matrix()
    other = Case("copy", 1, "pointwise", "eager", "float32", "cold", "launch", params={"n": 8})
    one = with_pairs_at_once([matrix, other], "1")
    assert one[0].params["pairs_at_once"] == 1 and "pairs_at_once=1" in one[0].case_key and one[1] == other
    assert with_pairs_at_once(one, "all")[0].case_key == matrix.case_key
    assert len(with_pairs_at_once([matrix, with_pairs_at_once([matrix], "2")[0]], "3")) == 1  # no case twice
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(ParamValueError, match="--pairs-at-once"):
            with_pairs_at_once([matrix], bad)
