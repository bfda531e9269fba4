"""The cross-check's rules on known numbers: spreads, disagreement (on the in-mode figures), the
peers' modes and how they differ from rooflab's, summaries, --peers."""
from __future__ import annotations

import math
import random

import pytest

from rooflab.db.crosscheck import geometric_mean, worst
from rooflab.runners.crosscheck.mode import Clock, Sample, TimerMode, configured_mode, differences
from rooflab.runners.crosscheck.peer import CollectivePeer, Peer, PeerName
from rooflab.runners.crosscheck.peers import make_peer, parse_peers
from rooflab.runners.crosscheck.session import PeerCheck, summarize_checks
from rooflab.runners.crosscheck.verdict import REASON_TEXT, Reason, TimerSummary, agreement, disagrees, summarize_timer
from rooflab.runners.errors import UserInputError
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.timing import TimingSettings

H100 = DeviceInfo(kind="cuda", name="H100", torch_device="cuda:0", memory_bytes=80 << 30, l2_bytes=50 << 20)
CPU = DeviceInfo(kind="cpu", name="cpu", torch_device="cpu", memory_bytes=16 << 30, l2_bytes=32 << 20)


def _case(cache: str) -> Case:
    return Case("copy", 1, "pointwise", "eager", "float32", cache, "launch", {"n": 1 << 26})


def test_figure_is_the_median_of_rounds_and_spread_the_larger_of_drift_and_noise() -> None:
    s = summarize_timer([1.0, 1.2, 0.9])
    assert s.median_ms == 1.0 and s.spread == pytest.approx(0.15)  # half of 1.2 - 0.9, over 1.0
    rng = random.Random()
    noisy = [[rng.uniform(0.5, 1.5) for _ in range(200)] for _ in range(3)]
    wide = summarize_timer([1.0, 1.0, 1.0], noisy)
    assert 0.02 < wide.spread < 0.2  # the CI of a median of 200 uniform samples on [0.5, 1.5]
    with pytest.raises(ValueError):
        summarize_timer([1.0, 0.0])


def test_disagreement_needs_a_gap_larger_than_either_spread() -> None:
    a = TimerSummary(1.00, 0.02, (1.0,))
    assert not disagrees(a, TimerSummary(1.03, 0.05, (1.03,)))  # within the peer's 5 %
    assert disagrees(a, TimerSummary(1.10, 0.05, (1.10,)))  # 0.10 ms > 0.055 ms and > 0.02 ms
    assert not disagrees(TimerSummary(1.0, 0.5, (1.0,)), TimerSummary(1.3, 0.01, (1.3,)))  # rooflab's own spread
    # two tight spreads (two rounds that fell together): below the 2 % floor the two agree, above it not
    tight = TimerSummary(0.5110, 0.0015, (0.5106, 0.5121))
    assert not disagrees(tight, TimerSummary(0.5026, 0.001, (0.502, 0.5032)))  # 1.7 % apart
    assert disagrees(tight, TimerSummary(0.4980, 0.001, (0.4975, 0.4985)))  # 2.6 % apart


def test_agreement_is_judged_on_the_in_mode_figures_only() -> None:
    peer = TimerSummary(2.1, 0.01, (2.1,))
    same = agreement(TimerSummary(2.1, 0.01, (2.1,)), peer)
    assert same.ratio == pytest.approx(1.0) and not same.disagrees and same.reason is None
    apart = agreement(TimerSummary(2.5, 0.01, (2.5,)), peer)
    assert apart.disagrees and apart.reason is None  # the same mode: no method difference explains it
    busy = agreement(TimerSummary(2.5, 0.01, (2.5,)), peer, contended=True)
    assert busy.disagrees and busy.reason is Reason.CONTENDED and busy.ratio == pytest.approx(2.5 / 2.1)


def test_each_peer_states_its_mode_as_its_code_times() -> None:
    """docs/crosscheck.md's table of modes, held against the peers' mode_for."""
    cold, hot = _case("cold"), _case("hot")
    modes = {name: make_peer(name) for name in PeerName}
    do_bench = modes[PeerName.DO_BENCH].mode_for(hot, H100)  # cold whatever the case asks
    assert do_bench.label() == "cold (write_sweep 256 MiB), back_to_back, unheld, device, per call"
    nv_cold = modes[PeerName.NVBENCH].mode_for(cold, H100)
    assert nv_cold.label() == "cold (write_sweep 50 MiB), idle, held, device, per call"
    assert modes[PeerName.NVBENCH].mode_for(cold, H100, op_syncs=True).hold == "sync_per_sample"
    assert (modes[PeerName.NVBENCH].mode_for(hot, H100).label()
            == "hot, back_to_back, sync_per_sample, device, block mean")
    assert modes[PeerName.TORCH].mode_for(cold, H100).label() == "hot, back_to_back, host, block mean"
    assert modes[PeerName.CUPYX].mode_for(cold, H100).label() == "hot, back_to_back, sync_per_sample, device, per call"
    assert modes[PeerName.TORCH].mode_for(cold, CPU).hold is None  # a CPU has nothing to hold


def test_the_method_difference_is_named_by_the_aspects_that_differ() -> None:
    ours = configured_mode(_case("cold"), TimingSettings(), H100)
    assert ours.label() == "cold (write_sweep 100 MiB), back_to_back, held, device, per call"
    nvbench = make_peer(PeerName.NVBENCH).mode_for(_case("cold"), H100)
    assert differences(ours, nvbench) == ("cache: cold (write_sweep 100 MiB) / cold (write_sweep 50 MiB)",
                                          "pace: back_to_back / idle")
    assert differences(ours, ours) == ()
    read_idle = configured_mode(_case("cold"), TimingSettings(flush_method="read_sweep", pace="idle"), H100)
    assert read_idle.flush_method == "read_sweep" and "pace: idle / back_to_back" in differences(read_idle, ours)
    torch_cpu = make_peer(PeerName.TORCH).mode_for(_case("cold"), CPU)
    on_cpu = differences(configured_mode(_case("cold"), TimingSettings(), CPU), torch_cpu)
    assert on_cpu == ("cache: cold (write_sweep 64 MiB) / hot", "sample: per call / block mean")
    hot_cpu = configured_mode(_case("hot"), TimingSettings(), CPU)
    assert differences(hot_cpu, torch_cpu) == ("sample: per call / block mean",)
    assert isinstance(hot_cpu, TimerMode) and hot_cpu.clock is Clock.HOST and hot_cpu.sample is Sample.PER_CALL


def test_geometric_mean_and_worst_case() -> None:
    assert geometric_mean([2.0, 0.5, 1.0]) == pytest.approx(1.0)
    assert geometric_mean([]) is None
    assert worst({"a": 1.1, "b": 0.8, "c": 1.2}) == ("b", 0.8)  # |log 0.8| > |log 1.2|


def test_summaries_per_peer_and_family() -> None:
    def check(key: str, family: str, ratio: float, peer: str = "torch", status: str = "ok") -> PeerCheck:
        return PeerCheck(key, "op", family, "hot", peer, "1", status, ratio=ratio if status == "ok" else None,
                         disagrees=ratio > 1.5, in_mode_ratio=1.0 + (ratio - 1.0) / 10 if status == "ok" else None)

    checks = [check("a", "gemm", 2.0), check("b", "gemm", 0.5), check("c", "pointwise", 1.0),
              check("d", "pointwise", 3.0, status="failed"), check("e", "gemm", 4.0, peer="do_bench")]
    by = {(s.peer, s.family): s for s in summarize_checks(checks)}
    assert by[("torch", "all")].cases == 3 and by[("torch", "all")].ratio_geomean == pytest.approx(1.0)
    assert by[("torch", "gemm")].disagreements == 1 and by[("torch", "gemm")].worst_ratio in (2.0, 0.5)
    do_bench_gemm = by[("do_bench", "gemm")].ratio_geomean
    assert do_bench_gemm is not None
    assert by[("do_bench", "all")].worst_case_key == "e" and math.isclose(do_bench_gemm, 4.0)
    gemm = by[("torch", "gemm")]  # the in-mode ratios: 1.1 and 0.95
    assert gemm.in_mode_ratio_geomean == pytest.approx(math.sqrt(1.1 * 0.95)) and gemm.in_mode_worst_case_key == "a"


def test_contended_text() -> None:
    assert REASON_TEXT[Reason.CONTENDED].startswith("the machine was contended")


def test_contended_rows_are_counted_but_left_out_of_the_geomean_and_worst_case() -> None:
    def check(key: str, ratio: float, contended: bool) -> PeerCheck:
        return PeerCheck(key, "op", "gemm", "hot", "torch", "1", "ok", ratio=ratio, disagrees=ratio > 1.5,
                         contended=contended,
                         contention_reasons=("load average 9.00 above 2 logical CPUs",) * contended)

    by = {(s.peer, s.family): s for s in summarize_checks(
        [check("a", 1.1, False), check("b", 0.9, False), check("c", 8.0, True)])}
    overall = by[("torch", "all")]
    assert (overall.cases, overall.contended, overall.disagreements) == (3, 1, 1)
    assert overall.ratio_geomean == pytest.approx(math.sqrt(1.1 * 0.9)) and overall.worst_case_key == "b"
    (only,) = [s for s in summarize_checks([check("c", 8.0, True)]) if s.family == "all"]
    assert (only.cases, only.contended, only.ratio_geomean, only.worst_ratio) == (1, 1, None, None)


def test_peers_option() -> None:
    assert parse_peers(None) == list(PeerName) and parse_peers("all") == list(PeerName)
    assert parse_peers("cupyx, torch,torch") == [PeerName.CUPYX, PeerName.TORCH]
    for bad in ("timeit", ",", "torch,nsight"):
        with pytest.raises(UserInputError, match="--peers"):
            parse_peers(bad)
    for name in PeerName:
        assert isinstance(make_peer(name), (Peer, CollectivePeer)) and make_peer(name).name is name


def test_a_block_of_the_timers_size_by_the_timers_rule() -> None:
    """torch's blocked_autorange rule on a fake clock: a call of 1 us grows to the first power of ten
    whose block outlasts 1e4 x the overhead of an empty timing; a call of 300 ms is one block."""
    from rooflab.runners.crosscheck.mode import timer_block_calls

    now = [0.0]

    def clock() -> float:
        now[0] += 1e-7  # every clock read costs 0.1 us: the overhead of an empty timing is 0.1 us
        return now[0]

    def call(seconds: float):
        def run() -> None:
            now[0] += seconds
        return run

    assert timer_block_calls(call(1e-6), lambda: None, clock) == 1000  # 1 ms block: 1e-4 x 1 ms > 0.1 us
    assert timer_block_calls(call(0.3), lambda: None, clock) == 1
