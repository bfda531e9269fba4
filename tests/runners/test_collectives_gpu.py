"""Collectives on CUDA GPUs with NCCL (`make test-gpu`): every collective correct and timed with CUDA
events in a group of one rank per GPU, NCCL's version recorded, a dying rank ending its case without
hanging the others, and a run on one GPU skipping collectives with the reason."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rooflab.db.collectives import collective_frame  # noqa: E402 - after pytest.importorskip
from rooflab.db.query import results  # noqa: E402 - after pytest.importorskip
from rooflab.runners.orchestration.messages import CaseRequest  # noqa: E402 - after pytest.importorskip
from rooflab.runners.orchestration.ranks import RankGroup  # noqa: E402 - after pytest.importorskip
from rooflab.runners.orchestration.run_options import RunOptions  # noqa: E402 - after pytest.importorskip
from rooflab.runners.orchestration.session import run_suite  # noqa: E402 - after pytest.importorskip
from rooflab.vocab import ResultStatus  # noqa: E402 - after pytest.importorskip
from tests.runners.collective_cases import alive, case, plugin_env  # noqa: E402 - after pytest.importorskip

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")]
two_gpus = pytest.mark.skipif(GPUS < 2, reason="a collective needs at least 2 GPUs")

ALL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")


@two_gpus
@pytest.mark.parametrize("mode, clock", [("isolated", "cuda_events"), ("stream", "perf_counter")])
def test_every_collective_is_correct_on_nccl_and_timed_in_both_modes(mode: str, clock: str) -> None:
    devices = [f"cuda:{i}" for i in range(GPUS)]
    with RankGroup("nccl", devices) as group:
        for op in ALL_OPS:
            for dtype in ("float32", "bfloat16"):
                request = CaseRequest(case(op, ranks=GPUS, dtype=dtype, backend="nccl", n=1 << 20, mode=mode), 3)
                result = group.run(request, 120)
                outcome = result.outcome
                assert outcome.status == ResultStatus.OK, (op, dtype, outcome.error)
                assert outcome.method is not None and outcome.stats is not None
                assert outcome.method.clock == clock and outcome.method.sync_method == "host_sync"
                # the mode's pace (the stored record adds the case's mode: records.build_record)
                assert outcome.method.pace == ("barrier" if mode == "isolated" else "back_to_back")
                assert result.collective is not None
                assert result.collective.comm_version and result.collective.ranks == GPUS
                assert len({d.split()[1] for d in result.collective.rank_devices}) == GPUS  # one GPU per rank
                assert 0 < outcome.stats.median_ms < 1000


@two_gpus
def test_a_dying_nccl_rank_crashes_its_case_and_leaves_nothing_running(monkeypatch) -> None:
    plugin_env(monkeypatch)
    group = RankGroup("nccl", ["cuda:0", "cuda:1"])
    pids = group.pids
    result = group.run(CaseRequest(case("planted_coll_die", backend="nccl", dtype="bfloat16", after=5), 0), 120)
    group.close()
    assert result.outcome.status == ResultStatus.CRASHED and result.outcome.error is not None
    assert "rank 1 died: exit code 3" in result.outcome.error
    assert alive(pids) == []


@two_gpus
def test_a_run_over_every_gpu_stores_the_groups(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("ROOFLAB_DB", raising=False)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    options = RunOptions(devices="all", quiet=True, filters=("family=collective", "n=2048,1048576", "mode=stream"),
                         timing_overrides={"max_time_ms": 200})
    summary = run_suite("quick", db=url, options=options, handle_signals=False)
    assert summary.counts["ok"] == 10, summary.counts  # five collectives at two sizes
    rows = results(url)
    assert (rows["ranks"] == GPUS).all() and rows["case_key"].str.contains("ranks=all").all()
    groups = collective_frame(url)
    assert groups["comm_version"].notna().all() and all(len(m) == GPUS for m in groups["rank_medians_ms"])


def test_one_gpu_skips_collectives_with_the_reason(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("ROOFLAB_DB", raising=False)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    summary = run_suite("quick", db=url, options=RunOptions(device="cuda:0", quiet=True,
                                                            filters=("op=all_reduce", "n=2048", "mode=stream")),
                        handle_signals=False)
    assert summary.counts["skipped"] == 1
    error = results(url).iloc[0]["error"]
    assert "at least 2 GPUs" in error and "--devices all" in error
