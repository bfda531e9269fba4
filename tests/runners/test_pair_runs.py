"""The link matrix in a run (`rooflab run links --device cpu`, as the collective phase measures it):
every pair stored as a result of its own, with both ends in its params and its ends' medians in its
group record; `--pairs-at-once 1` another matrix; `--resume` finds the matrix held by its pairs and
starts nothing; the places of a group's ranks say which processes are the case's own."""
from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from rooflab.db.collectives import collective_frame
from rooflab.db.query import results
from rooflab.runners.errors import UserInputError
from rooflab.runners.orchestration import collectives, session
from rooflab.runners.orchestration.rank_places import RankPlace, own_pids
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.session import RunSummary, run_suite
from rooflab.suite.ops.pairs import END_PARAMS, matrix_key
from tests.runners.collective_cases import forkserver_children

SPEC = """\
name: pairs
defaults:
  cache: [hot]
  timing: {warmup_ms: 0, warmup_calls: 2, min_samples: 3, max_samples: 3, min_time_ms: 0, max_time_ms: 2000}
benchmarks:
  - name: matrix
    op: sendrecv_pairs
    backends: [gloo]
    params: {n: 2, ranks: all, direction: both}
"""


def _run(spec: Path, url: str, *, pairs_at_once: str, run_id: str | None = None,
         resume: str | None = None) -> RunSummary:
    options = RunOptions(device="cpu", quiet=True, pairs_at_once=pairs_at_once, run_id=run_id, resume=resume)
    return run_suite(spec, db=url, options=options, handle_signals=False)


def test_each_pair_is_stored_with_both_ends_and_a_resumed_run_holds_the_matrix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROOFLAB_DB", raising=False)
    spec = tmp_path / "pairs.yaml"
    spec.write_text(SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    done = _run(spec, url, run_id="links", pairs_at_once="1")
    assert done.status == "complete" and done.counts.get("ok") == 6 and sum(done.counts.values()) == 6, done.counts
    rows = results(url, run_id="links")
    assert len(rows) == 6 and (rows["status"] == "ok").all() and (rows["ranks"] == 4).all()
    matrix = {matrix_key(k) for k in rows["case_key"]}
    assert len(matrix) == 1 and "pairs_at_once=1" in str(next(iter(matrix)))
    ends = [{name: params[name] for name in END_PARAMS} for params in rows["params"].map(json.loads)]
    assert sorted((e["a_rank"], e["b_rank"]) for e in ends) == list(combinations(range(4), 2))
    assert len({(e["a_host"], e["b_host"]) for e in ends}) == 1 and all(e["a_device"] == e["b_device"] for e in ends)
    # busbw: nccl-tests' sendrecv, S = n·s (8 B) over the pair's median
    assert (rows["bytes"] == 8).all()
    assert rows["gbps"].tolist() == pytest.approx((rows["bytes"] / rows["median_ms"] / 1e6).tolist())
    groups = collective_frame(url, run_ids=["links"])
    assert len(groups) == 6 and all(len(m) == 2 for m in groups["rank_medians_ms"])
    # resumed with the same options: the matrix is held (its pairs are stored), nothing is started
    started: list[str] = []
    monkeypatch.setattr(session, "prestart_worker_server", lambda: started.append("fork server"))
    monkeypatch.setattr(collectives, "ChildCall", lambda *args: started.append("rank 0's description"))
    again = _run(spec, url, resume="links", pairs_at_once="1")
    assert started == [] and again.status == "complete" and again.already_measured == 1
    assert forkserver_children() == set()
    with pytest.raises(UserInputError, match="--pairs-at-once .* must be an integer >= 1 or all, got 'none'"):
        _run(spec, url, run_id="bad", pairs_at_once="none")


def test_the_cases_own_processes_are_the_groups_ranks_on_its_host() -> None:
    places = [RankPlace("n1", "cuda:0", "GPU-a", "f", 101), RankPlace("n1", "cuda:1", "GPU-b", "f", 102),
              RankPlace("n2", "cuda:0", "GPU-c", "f", 201), RankPlace("n2", "cuda:1", "GPU-d", "f", 202)]
    assert own_pids(places, 0) == (101, 102) and own_pids(places, 3) == (201, 202) and own_pids([], 0) == ()
    assert places[0].text == "n1 cuda:0 GPU-a"
