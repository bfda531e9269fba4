"""Collective cases in a run: measured after the lanes as a phase of the same run, stored as
measurements (with the world size and the group's record), a dying rank costing only its case,
`--resume` and shards treating them as any case, nothing left running."""
from __future__ import annotations

from pathlib import Path

import pytest

from rooflab.db.collectives import collective_frame
from rooflab.db.query import results
from rooflab.reports.roofs.interconnect import collective_ceilings
from rooflab.runners.orchestration import collectives, session, supervisor
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.session import RunSummary, run_suite
from rooflab.suite.ops import collective as collective_op
from tests.runners.collective_cases import forkserver_children, plugin_env

SPEC = """\
name: comms
defaults:
  cache: [hot]
  timing: {warmup_ms: 0, warmup_calls: 2, min_samples: 6, max_samples: 6, min_time_ms: 0, max_time_ms: 2000}
benchmarks:
  - name: lane
    op: copy
    params: {n: 4096}
  - name: reduce
    op: all_reduce
    backends: [gloo]
    params: {n: [1024, 65536], ranks: 2}
  - name: reduce_isolated
    op: all_reduce
    backends: [gloo]
    params: {n: 1024, ranks: 2, mode: isolated}
  - name: dies
    op: planted_coll_die
    backends: [gloo]
    params: {n: 1024, ranks: 2, after: 3}
  - name: gather
    op: all_gather
    backends: [gloo]
    params: {n: 1024, ranks: [3, all]}
"""


@pytest.fixture()
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    plugin_env(monkeypatch)
    monkeypatch.delenv("ROOFLAB_DB", raising=False)
    path = tmp_path / "comms.yaml"
    path.write_text(SPEC)
    return path


def _run(spec: Path, url: str, **options) -> RunSummary:
    return run_suite(spec, db=url, options=RunOptions(device="cpu", quiet=True, **options), handle_signals=False)


def test_collectives_are_stored_as_measurements_with_their_group_and_shards_and_resume_treat_them_as_any_case(
        spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One run measured in two shards (each starts its own worker and rank groups, the costly part):
    the shards split the cases, their rows together are the whole run's, and `--resume` measures
    nothing again."""
    # settings of the libraries in the run's environment, to be recorded with every collective:
    # NCCL_ALGO (an NCCL setting that gloo ignores) and GLOO_SOCKET_IFNAME=lo (the loopback gloo uses)
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    # the collective ops' rules that ask torch (torch.distributed, gloo) are judged in a worker process:
    # the supervisor of a CPU run does not import torch for them (this process has it: asked, not imported)
    asked = []
    monkeypatch.setattr(collective_op, "_dist", lambda: asked.append("torch.distributed in the supervisor"))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    shards = [_run(spec, url, run_id="night", shard="0/2"), _run(spec, url, run_id="night", shard="1/2")]
    assert asked == []
    counts = {status: sum(s.counts.get(status, 0) for s in shards) for status in ("ok", "crashed")}
    assert all(sum(s.counts.values()) > 0 for s in shards), [s.counts for s in shards]  # both shards had cases
    assert counts == {"ok": 6, "crashed": 1} and sum(sum(s.counts.values()) for s in shards) == 7, counts
    assert shards[1].status == "complete" and forkserver_children() == set()  # the last shard completes the run
    rows = results(url, run_id="night")
    assert rows.loc[rows["op"] == "copy", "ranks"].isna().all()
    reduce = rows[rows["op"] == "all_reduce"].sort_values("bytes")
    assert list(reduce["ranks"]) == [2, 2, 2] and (reduce["backend"] == "gloo").all()
    # gbps is nccl-tests' busbw: bytes (S x 2(N-1)/N, here x1) over the median
    assert list(reduce["bytes"]) == [4096, 4096, 262144]
    assert reduce["bytes_read"].isna().all()  # link bytes: not split into read and written
    assert reduce["gbps"].tolist() == pytest.approx((reduce["bytes"] / reduce["median_ms"] / 1e6).tolist())
    gathers = rows[rows["op"] == "all_gather"]
    assert sorted(gathers["ranks"]) == [2, 3]  # ranks=all is the CPU's group of 2
    died = rows[rows["op"] == "planted_coll_die"].iloc[0]
    assert died["status"] == "crashed" and "rank 1 died: exit code 3" in died["error"]
    groups = collective_frame(url, run_ids=["night"])
    assert len(groups) == 6 and len(rows) == 7
    ok = groups[groups["status"] == "ok"]
    assert all(len(m) == r for m, r in zip(ok["rank_medians_ms"], ok["ranks"], strict=True))
    assert ok["slowest_rank"].notna().all() and (ok["comm_version"].isna()).all()  # gloo: no NCCL
    settings = {"NCCL_ALGO": "Ring", "GLOO_SOCKET_IFNAME": "lo"}.items()
    assert all(settings <= dict(s).items() for s in ok["comm_settings"]), list(ok["comm_settings"])
    # every collective records how it was measured: hot (no flush), its mode, and the pace that mode
    # gives its samples (stream: calls back to back; isolated: a barrier before each call); the
    # ceilings (busbw and latency) say so; a crashed case records its mode, and no pace
    collective = rows[rows["family"] == "collective"].set_index("case_key")
    timed = collective[collective["status"] == "ok"]
    assert len(timed) == 5 and (timed["flush_method"] == "none").all()
    isolated = timed.index.str.contains("mode=isolated")
    assert list(timed.loc[isolated, "collective_mode"]) == ["isolated"]
    assert list(timed.loc[isolated, "pace"]) == ["barrier"]
    assert (timed.loc[~isolated, "collective_mode"] == "stream").all()
    assert (timed.loc[~isolated, "pace"] == "back_to_back").all()
    crashed = collective[collective["status"] == "crashed"]
    assert list(crashed["collective_mode"]) == ["stream"] and crashed["pace"].isna().all()
    ceilings = {str(c.kind): c for c in collective_ceilings(timed.reset_index(), None) if c.collective == "all_reduce"}
    assert ceilings["interconnect"].method == ceilings["comm_latency"].method == "hot, back_to_back, stream"
    assert "mode=isolated" not in ceilings["comm_latency"].case_key  # the floor comes from one mode
    # the summary names each collective's group, not the phase
    devices = {row["device"] for s in shards for row in s.slowest}
    assert "collectives" not in devices and devices & {"cpu x2 (gloo)", "cpu x3 (gloo)"}, devices
    assert rows["case_key"].is_unique
    # the resumed run finds every case stored on this CPU, known without torch: it starts no fork
    # server, no worker and no process to describe rank 0's device (runners/orchestration/held.py)
    started: list[str] = []
    monkeypatch.setattr(session, "prestart_worker_server", lambda: started.append("fork server"))
    monkeypatch.setattr(supervisor, "WorkerProcess", lambda device: started.append(f"worker on {device}"))
    monkeypatch.setattr(collectives, "ChildCall", lambda *args: started.append("rank 0's description"))
    again = _run(spec, url, resume="night")
    assert started == [] and again.status == "complete"
    assert sum(again.counts.values()) == 0 and again.already_measured == 7
    assert forkserver_children() == set()
