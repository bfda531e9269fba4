"""The cross-check's rules on known numbers: spreads, disagreement, likely reasons, summaries, --peers."""
from __future__ import annotations

import math
import random

import pytest

from rooflab.db.crosscheck import geometric_mean, worst
from rooflab.runners.crosscheck.peer import Peer, PeerClock, PeerName
from rooflab.runners.crosscheck.peers import make_peer, parse_peers
from rooflab.runners.crosscheck.session import PeerCheck, summarize_checks
from rooflab.runners.crosscheck.verdict import (
    LAUNCH_SCALE_MS,
    REASON_TEXT,
    Reason,
    TimerSummary,
    agreement,
    disagrees,
    likely_reason,
    summarize_timer,
)
from rooflab.runners.errors import UserInputError
from rooflab.vocab import CacheMode


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


def _reason(**kw):  # type: ignore[no-untyped-def] - a test helper, left untyped
    base = dict(rooflab_ms=1.0, rooflab_mean_ms=1.0, peer_ms=0.5, case_cache="cold", peer_cache=CacheMode.HOT,
                peer_clock=PeerClock.HOST_BLOCK_MEAN, on_gpu=False)
    return likely_reason(**(base | kw))


def test_likely_reasons() -> None:
    assert _reason() is Reason.COLD_VS_HOT  # cold rooflab slower than a hot peer
    assert _reason(peer_ms=2.0) is None  # cold slower is the explanation, not cold faster
    assert _reason(case_cache="hot", peer_cache=CacheMode.COLD, peer_ms=2.0,
                   peer_clock=PeerClock.DEVICE_EVENTS_PER_CALL) is Reason.COLD_VS_HOT
    assert _reason(case_cache="hot", peer_ms=2.0, rooflab_mean_ms=1.9) is Reason.MEAN_VS_MEDIAN
    assert _reason(case_cache="hot", peer_ms=2.0, on_gpu=True) is Reason.HOST_TIME
    assert _reason(case_cache="hot", rooflab_ms=LAUNCH_SCALE_MS / 5, rooflab_mean_ms=LAUNCH_SCALE_MS / 5, peer_ms=0.02,
                   peer_cache=CacheMode.HOT, peer_clock=PeerClock.DEVICE_EVENTS_PER_CALL, on_gpu=True) is Reason.LAUNCH_OVERHEAD
    assert _reason(case_cache="hot", rooflab_ms=1.0, peer_ms=2.0, peer_clock=PeerClock.DEVICE_EVENTS_PER_CALL,
                   on_gpu=True) is None  # a long kernel: launch overhead cannot explain it


def test_agreement_gives_the_ratio_and_no_reason_when_they_agree() -> None:
    a = agreement(TimerSummary(2.0, 0.1, (2.0,)), TimerSummary(2.1, 0.1, (2.1,)), rooflab_mean_ms=2.0,
                  case_cache="hot", peer_cache=CacheMode.HOT, peer_clock=PeerClock.HOST_BLOCK_MEAN, on_gpu=False)
    assert a.ratio == pytest.approx(2.0 / 2.1) and not a.disagrees and a.reason is None


def test_geometric_mean_and_worst_case() -> None:
    assert geometric_mean([2.0, 0.5, 1.0]) == pytest.approx(1.0)
    assert geometric_mean([]) is None
    assert worst({"a": 1.1, "b": 0.8, "c": 1.2}) == ("b", 0.8)  # |log 0.8| > |log 1.2|


def test_summaries_per_peer_and_family() -> None:
    def check(key: str, family: str, ratio: float, peer: str = "torch", status: str = "ok") -> PeerCheck:
        return PeerCheck(key, "op", family, "hot", peer, "1", status, ratio=ratio if status == "ok" else None,
                         disagrees=ratio > 1.5)

    checks = [check("a", "gemm", 2.0), check("b", "gemm", 0.5), check("c", "pointwise", 1.0),
              check("d", "pointwise", 3.0, status="failed"), check("e", "gemm", 4.0, peer="do_bench")]
    by = {(s.peer, s.family): s for s in summarize_checks(checks)}
    assert by[("torch", "all")].cases == 3 and by[("torch", "all")].ratio_geomean == pytest.approx(1.0)
    assert by[("torch", "gemm")].disagreements == 1 and by[("torch", "gemm")].worst_ratio in (2.0, 0.5)
    assert by[("do_bench", "all")].worst_case_key == "e" and math.isclose(by[("do_bench", "gemm")].ratio_geomean, 4.0)


def test_contended_comes_before_every_other_reason() -> None:
    # cold rooflab slower than a hot peer would be cold_vs_hot; on a contended machine it is contended
    kw = dict(rooflab_ms=2.0, rooflab_mean_ms=2.0, peer_ms=1.0, case_cache="cold", peer_cache=CacheMode.HOT,
              peer_clock=PeerClock.HOST_BLOCK_MEAN, on_gpu=False)
    assert likely_reason(**kw) is Reason.COLD_VS_HOT
    assert likely_reason(**kw, contended=True) is Reason.CONTENDED
    a, b = TimerSummary(2.0, 0.01, (2.0,)), TimerSummary(1.0, 0.01, (1.0,))
    verdict = agreement(a, b, rooflab_mean_ms=2.0, case_cache="hot", peer_cache=CacheMode.HOT,
                        peer_clock=PeerClock.DEVICE_EVENTS_PER_CALL, on_gpu=True, contended=True)
    assert verdict.disagrees and verdict.reason is Reason.CONTENDED and verdict.ratio == 2.0
    assert REASON_TEXT[Reason.CONTENDED].startswith("the machine was contended")


def test_contended_rows_are_counted_but_left_out_of_the_geomean_and_worst_case() -> None:
    def check(key: str, ratio: float, contended: bool) -> PeerCheck:
        return PeerCheck(key, "op", "gemm", "hot", "torch", "1", "ok", ratio=ratio, disagrees=ratio > 1.5,
                         contended=contended, contention_reasons=("load average 9.00 above 2 logical CPUs",) * contended)

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
        assert isinstance(make_peer(name), Peer) and make_peer(name).name is name
