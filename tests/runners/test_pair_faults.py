"""A matrix of the link matrix that breaks in one of its rounds, in a run (the collective phase):
the pairs of the rounds before it are stored, the matrix is stored crashed naming the round it broke
in and that round's pairs; and a matrix whose rounds together outlast one case's limit is not cut,
since the limit is each round's. A rank that dies in a round of a group: the rounds before arrive."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rooflab.db.query import results
from rooflab.runners.orchestration.messages import CaseRequest
from rooflab.runners.orchestration.rank_pairs import matrix_fault
from rooflab.runners.orchestration.ranks import RankGroup
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.session import run_suite
from rooflab.suite.ops.pairs import matrix_key, pair_of_key, schedule
from rooflab.vocab import ResultStatus
from tests.runners.collective_cases import FAST, alive, case, plugin_env

ROUNDS = schedule(4, 1)  # one pair at a time on four ranks: six rounds
ROUND_S = 0.3  # each round samples this long (its max_time_ms) ...
LIMIT_S = 1.5  # ... under a limit of a case (a round) five times that, and six rounds together above it
SPEC = f"""\
name: pairs
defaults:
  cache: [hot]
  backends: [gloo]
  timing: {{warmup_ms: 0, warmup_calls: 2, min_samples: 3, max_samples: 100000, min_time_ms: 0,
           max_time_ms: {ROUND_S * 1e3:g}}}
benchmarks:
  - name: whole
    op: sendrecv_pairs
    params: {{n: 2, ranks: all, direction: both, pairs_at_once: 1}}
  - name: hangs
    op: planted_pairs_fault
    params: {{n: 2, ranks: all, direction: both, pairs_at_once: 1, bad_rank: {ROUNDS[3][0][1]}, bad_round: 4,
             fault: hang}}
"""


def test_a_matrix_is_limited_round_by_round_and_one_broken_in_round_4_keeps_rounds_1_to_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_env(monkeypatch)
    monkeypatch.delenv("ROOFLAB_DB", raising=False)
    spec = tmp_path / "pairs.yaml"
    spec.write_text(SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    options = RunOptions(device="cpu", quiet=True, run_id="links", case_timeout_s=LIMIT_S)
    run_suite(spec, db=url, options=options, handle_signals=False)
    rows = results(url, run_id="links")
    whole = rows[rows["op"] == "sendrecv_pairs"]
    # six rounds of at least ROUND_S each, longer together than LIMIT_S: measured whole (the limit
    # held the whole matrix before, and crashed it after about five rounds)
    assert len(whole) == 6 and (whole["status"] == "ok").all(), whole[["status", "error"]]
    hangs = rows[rows["op"] == "planted_pairs_fault"]
    kept = hangs[hangs["case_key"].map(lambda k: pair_of_key(k) is not None)]
    ends = sorted((e.a_rank, e.b_rank) for k in kept["case_key"] if (found := pair_of_key(k)) is not None
                  for e in [found[1]])
    assert ends == sorted(pair for r in ROUNDS[:3] for pair in r) and (kept["status"] == "ok").all()
    (broken,) = hangs[hangs["case_key"].map(lambda k: pair_of_key(k) is None)].to_dict("records")
    a, b = ROUNDS[3][0]
    assert broken["status"] == "crashed" and broken["case_key"] == matrix_key(kept["case_key"].iloc[0])
    assert broken["error"].startswith(f"in round 4 of 6 (pairs {a}-{b}): timed out after"), broken["error"]
    assert broken["error"].endswith("the pairs of the 3 round(s) before it were stored"), broken["error"]


def test_a_rank_dying_in_round_2_leaves_round_1s_pairs_with_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_env(monkeypatch)
    # a rank of round 2 other than rank 0 (all pairs at once: three rounds of two): rank 0 may still be
    # closing round 1 when it dies, and the parent waits for rank 0's reply rather than lose that round
    bad = next(r for pair in schedule(4)[1] for r in pair if r != 0)
    group = RankGroup("gloo", ["cpu"] * 4)
    pids = group.pids
    result = group.run(CaseRequest(case("planted_pairs_fault", ranks=4, n=64, bad_rank=bad, bad_round=2,
                                        timing=replace(FAST, min_samples=3, max_samples=3)), seed=3), 60.0)
    group.close()
    assert result.broken and result.outcome.status == ResultStatus.CRASHED, result.outcome.error
    assert f"rank {bad} died: exit code 3" in str(result.outcome.error)
    assert result.rounds_done == 1 and [p.pair for p in result.pairs] == list(schedule(4)[0])
    assert all(p.outcome.status == ResultStatus.OK for p in result.pairs) and alive(pids) == []


def test_the_fault_of_a_matrix_names_its_round_and_what_was_kept() -> None:
    c = case("sendrecv_pairs", ranks=4, pairs_at_once=1)
    (a, b), = ROUNDS[0]
    assert matrix_fault(c, 4, 0, "rank 1 died") == f"in round 1 of 6 (pairs {a}-{b}): rank 1 died"
    assert matrix_fault(c, 4, 2, "x").endswith("x; the pairs of the 2 round(s) before it were stored")
    assert matrix_fault(c, 4, 6, "after the last round") == "after the last round"
    every = case("sendrecv_pairs", ranks=4)
    assert matrix_fault(every, 4, 1, "x").startswith("in round 2 of 3 (pairs ")
