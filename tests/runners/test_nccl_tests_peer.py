"""The nccl_tests peer: nccl-tests' binaries run as a collective cross-check peer. No binary runs
here (they need GPUs): a fake one on PATH (tests/runners/fake_nccl_tests.py) prints nccl-tests'
layout with planted times, records the command line it was given, and plants faults."""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from rooflab.runners.crosscheck.nccl_tests_peer import BINARIES, NcclTestsError, NcclTestsPeer, command
from rooflab.runners.crosscheck.peer import PeerClock, PeerName
from rooflab.runners.crosscheck.peers import make_peer, parse_peers
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CacheMode

FAKE = Path(__file__).with_name("fake_nccl_tests.py")
GPU = DeviceInfo("cuda", "fake GPU", "cuda:0", 80 << 30, 50 << 20, (9, 0), 132)
CPU = DeviceInfo("cpu", "cpu", "cpu", 16 << 30, 32 << 20)


def collective(op: str, n: int, dtype: str = "float32", ranks: int = 2, **extra: bool) -> Case:
    o = get_op(op)
    params = o.resolved_params({"n": n, "ranks": ranks, **extra})
    return Case(op, o.version, o.family, "nccl", dtype, "hot", "launch", params)


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every nccl-tests binary name on a PATH of its own, each the fake; the record of a call's
    arguments in the returned file."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in BINARIES.values():
        path = folder / name
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$0" "$@"\n', encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(folder))
    record = tmp_path / "args.json"
    monkeypatch.setenv("FAKE_NCCL_ARGS", str(record))
    monkeypatch.setenv("FAKE_NCCL_OUT_US", "123.4")
    monkeypatch.setenv("FAKE_NCCL_IN_US", "111.1")
    return record


def test_the_command_line_asks_the_case_size_dtype_and_reduction_as_nccl_tests_counts_them() -> None:
    args = command(collective("all_reduce", 1 << 20), 2)
    assert args == ["all_reduce_perf", "-b", str(4 << 20), "-e", str(4 << 20), "-g", "2", "-d", "float",
                    "-w", "5", "-n", "20", "-c", "0", "-o", "sum"]
    gather = command(collective("all_gather", 1000, "bfloat16", ranks=4), 4)
    assert gather[:7] == ["all_gather_perf", "-b", str(1000 * 2 * 4), "-e", str(1000 * 2 * 4), "-g", "4"]
    assert gather[gather.index("-d") + 1] == "bfloat16" and "-o" not in gather  # gathers reduce nothing
    assert command(collective("all_to_all", 512, ranks=2), 2)[0] == "alltoall_perf"
    with pytest.raises(NcclTestsError, match="no -d for float8_e4m3fn"):
        command(collective("all_reduce", 512, "float8_e4m3fn"), 2)


def test_a_round_reads_the_row_of_its_size_out_of_place_or_in_place(fake_bin: Path) -> None:
    peer = NcclTestsPeer()
    assert peer.version() is None  # nothing run yet
    timing = peer.time_collective(collective("all_reduce", 1 << 20), ("cuda:2", "cuda:3"), "nccl")
    assert timing.median_ms == pytest.approx(0.1234) and timing.samples_ms == (pytest.approx(0.1234),)
    assert (timing.cache, timing.clock, timing.calls_per_sample) == (CacheMode.HOT, PeerClock.HOST_LOOP_RANK_MEAN, 20)
    seen = json.loads(fake_bin.read_text())
    assert seen["name"] == "all_reduce_perf" and seen["visible"] == "2,3"  # the group's GPUs, in its order
    assert seen["argv"][seen["argv"].index("-g") + 1] == "2"
    assert peer.version() == "2.13.9"
    inplace = peer.time_collective(collective("all_reduce", 1 << 20, inplace=True), ("cuda:0", "cuda:1"), "nccl")
    assert inplace.median_ms == pytest.approx(0.1111)


def test_a_failing_binary_a_missing_row_and_another_backend_are_errors_with_the_reason(
        fake_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    peer = NcclTestsPeer()
    case = collective("all_reduce", 1 << 20)
    monkeypatch.setenv("FAKE_NCCL_FAULT", "exit")
    with pytest.raises(NcclTestsError, match=r"exited 1: .*unhandled cuda error"):
        peer.time_collective(case, ("cuda:0", "cuda:1"), "nccl")
    monkeypatch.setenv("FAKE_NCCL_FAULT", "size")
    with pytest.raises(NcclTestsError, match=rf"no row of {4 << 20} B \(rows: \[{8 << 20}\]\)"):
        peer.time_collective(case, ("cuda:0", "cuda:1"), "nccl")
    with pytest.raises(NcclTestsError, match="times NCCL; this case runs over gloo"):
        peer.time_collective(case, ("cpu", "cpu"), "gloo")


def test_available_on_a_gpu_with_the_binaries_on_path_only(fake_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    peer = NcclTestsPeer()
    assert peer.unavailable_reason(GPU) is None
    assert "CUDA GPUs" in (peer.unavailable_reason(CPU) or "")
    monkeypatch.setenv("PATH", str(fake_bin.parent / "nothing"))
    assert peer.unavailable_reason(GPU) == "no nccl-tests binary (all_reduce_perf, ...) on PATH"


def test_the_peer_is_registered_by_name() -> None:
    assert isinstance(make_peer(PeerName.NCCL_TESTS), NcclTestsPeer)
    assert PeerName.NCCL_TESTS in parse_peers("all") and parse_peers("nccl_tests") == [PeerName.NCCL_TESTS]
