"""The end-of-run summary names where a collective case ran: its group's devices and backend, read
from the case's result (not the phase's lane name, "collectives")."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rooflab.record import CollectiveRecord, Statistics
from rooflab.runners.orchestration.collectives import LANE, group_label
from rooflab.runners.orchestration.messages import CaseOutcome
from rooflab.runners.orchestration.records import build_record, op_work_model
from rooflab.runners.orchestration.session import _summary
from rooflab.runners.orchestration.supervisor import CaseResult, SupervisorResult
from rooflab.vocab import ResultStatus
from tests.runners.collective_cases import case


def _record(c: Any, median_ms: float, collective: CollectiveRecord | None) -> Any:
    stats = Statistics(median_ms=median_ms, mean_ms=median_ms, min_ms=median_ms, max_ms=median_ms, p10_ms=median_ms,
                       p90_ms=median_ms, iqr_ms=0.0, std_ms=0.0, n_samples=8)
    outcome = CaseOutcome(c.case_key, ResultStatus.OK, stats=stats, samples_ms=(median_ms,) * 8)
    record = build_record(c, outcome, run_id="r", device_fingerprint="fp", device_uuid=None, shard=None,
                          work_model=op_work_model)
    return replace(record, collective=collective)


def _places(host: str, devices: list[str]) -> tuple[str, ...]:
    return tuple(f"{host} {d} GPU-{i}" if d.startswith("cuda") else f"{host} {d}" for i, d in enumerate(devices))


@pytest.mark.parametrize("backend, devices, hosts, label", [
    ("gloo", ["cpu"] * 2, ["box"] * 2, "cpu x2 (gloo)"),
    ("nccl", [f"cuda:{i}" for i in range(8)], ["node1"] * 8, "cuda:0-7 (nccl)"),
    ("nccl", ["cuda:0", "cuda:1"], ["node1"] * 2, "cuda:0,1 (nccl)"),
    ("nccl", ["cuda:0", "cuda:2", "cuda:3", "cuda:4", "cuda:6"], ["node1"] * 5, "cuda:0,2-4,6 (nccl)"),
    ("nccl", [f"cuda:{i % 4}" for i in range(8)], [f"node{i // 4}" for i in range(8)], "cuda:0-3 on 2 hosts (nccl)"),
])
def test_the_group_label_names_the_ranks_devices(backend: str, devices: list[str], hosts: list[str],
                                                   label: str) -> None:
    c = case("all_reduce", ranks=len(devices), backend=backend)
    places = tuple(f"{h} {d}" for h, d in zip(hosts, devices, strict=True))
    record = _record(c, 1.0, CollectiveRecord(ranks=len(devices), rank_devices=places))
    assert group_label(c, record) == label
    assert group_label(c, _record(c, 1.0, CollectiveRecord(ranks=len(devices)))) == f"{len(devices)} ranks ({backend})"


def test_the_slowest_table_shows_a_collectives_group_not_the_phase() -> None:
    lane = case("copy", n=4096)
    gloo = case("all_gather", n=1 << 20, ranks=2)
    nccl = case("all_reduce", n=1 << 20, ranks="all", backend="nccl")
    results = (
        CaseResult("cpu", lane, _record(lane, 1.0, None), 0.1, True),
        CaseResult(LANE, gloo, _record(gloo, 3.0, CollectiveRecord(ranks=2, rank_devices=_places("box", ["cpu"] * 2))),
                   0.2, True),
        CaseResult(LANE, nccl, _record(nccl, 2.0, CollectiveRecord(
            ranks=8, rank_devices=_places("node1", [f"cuda:{i}" for i in range(8)]))), 0.3, True),
    )
    summary = _summary(SupervisorResult("complete", results, (), 0), "r", "quick", "sqlite://", None, 3, 1.0)
    assert [row["device"] for row in summary.slowest] == ["cpu x2 (gloo)", "cuda:0-7 (nccl)", "cpu"]
