"""The memory check of a collective case is made at the world size the case runs at: `ranks: all`
is every GPU of the run (or every rank of a Slurm step), not the CPU's group of two that the pure
models read. Faked GPUs and memory: no GPU, no process group, no NCCL needed."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from rooflab.runners.orchestration.collectives import group_devices, group_skip_reason
from rooflab.runners.orchestration.messages import CaseRequest
from rooflab.runners.orchestration.rank_case import run_rank_case
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import ResultStatus
from tests.runners.collective_cases import case

GIB = 1 << 30
N = 1 << 28  # all_to_all of 2^28 float32 per rank: 2 x n x ranks x 4 B = 4 GiB at 2 ranks, 16 GiB at 8
EIGHT_GPUS = [f"cuda:{i}" for i in range(8)]


def _gpu(memory_gib: int) -> DeviceInfo:
    return DeviceInfo("cuda", "fake GPU", "cuda:0", memory_gib * GIB, 50 << 20, (9, 0), 132)


def _nightly_case(ranks: Any = "all") -> Any:
    from dataclasses import replace

    return replace(case("all_to_all", n=N, ranks=ranks, backend="nccl"), max_memory_fraction=0.8)


@pytest.fixture()
def nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.distributed as on a GPU build: NCCL there (the op's own rules pass on a faked GPU)."""
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)


def test_ranks_all_is_checked_at_the_runs_gpus_before_the_group_starts(nccl: None) -> None:
    c = _nightly_case()
    devices, size, reason = group_devices(c, EIGHT_GPUS)
    assert (devices, size, reason) == (EIGHT_GPUS, 8, None)
    # 16 GiB per rank at 8 ranks: over 0.8 x 12 GiB (the old check read ranks=all as 2: 4 GiB, fits)
    reason = group_skip_reason(c, _gpu(12), size)
    assert reason is not None and "would not fit" in reason and "16.00 GiB" in reason
    assert group_skip_reason(c, _gpu(24), size) is None  # 16 GiB within 0.8 x 24 GiB
    # two GPUs: `all` is 2 ranks, 4 GiB fits the same 12 GiB part
    devices, size, _ = group_devices(c, EIGHT_GPUS[:2])
    assert size == 2 and group_skip_reason(c, _gpu(12), size) is None


class _Control:
    """One rank's view of a group of `size` whose every rank says the same (no process group)."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size

    def agree(self, mine: Any) -> list[Any]:
        return [mine] * self.size

    def barrier(self) -> None:
        pass

    def decide(self, value: int) -> int:
        return value

    def gather(self, values: Sequence[float]) -> list[list[float]]:
        return [list(values)] * self.size


def test_each_rank_checks_its_free_memory_at_the_groups_size(nccl: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooflab.runners.orchestration import prepare

    monkeypatch.setattr(prepare, "_available_memory_bytes", lambda device: 10 * GIB)  # free now on this GPU
    request = CaseRequest(_nightly_case(), 0, {})
    reply = run_rank_case(request, _gpu(80), _Control(rank=1, size=8), backend="nccl")
    assert reply.status == ResultStatus.SKIPPED and not reply.broken, reply.error
    assert reply.error is not None and "needs 16.00 GiB, only 10.00 GiB free" in reply.error


def test_a_slurm_step_reads_its_own_world_size(nccl: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rooflab collectives` stores `ranks: all` under the step's size; its ranks check at that size."""
    from rooflab.runners.orchestration import prepare
    from rooflab.runners.orchestration.env_ranks import cases_for_world

    monkeypatch.setattr(prepare, "_available_memory_bytes", lambda device: 60 * GIB)
    (c,) = cases_for_world([_nightly_case()], 32)
    assert c.params["ranks"] == 32
    reply = run_rank_case(CaseRequest(c, 0, {}), _gpu(80), _Control(rank=3, size=32), backend="nccl")
    assert reply.status == ResultStatus.SKIPPED and reply.error is not None
    assert "needs 64.00 GiB" in reply.error  # 2 x 2^28 x 32 x 4 B per rank
