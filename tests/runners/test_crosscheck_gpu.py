"""The GPU peers against rooflab on a CUDA device (skipped without one, or without the peer's package).

Cases of a few hundred microseconds (a 256 MiB copy, a 4096^3 bf16 GEMM) are far from launch
overhead, so every peer must agree with rooflab as configured in the same cache mode within 10 %,
rooflab timed in the peer's own mode within 2 % (issue 20's goal for kernels of 50 us and more),
and do_bench (always cold) must be no faster than rooflab's hot figure for a case that does not
fit in L2."""
from __future__ import annotations

from pathlib import Path

import pytest

from rooflab.runners.crosscheck.peer import PeerName
from rooflab.runners.crosscheck.peers import make_peer
from rooflab.runners.crosscheck.session import run_crosscheck

pytestmark = pytest.mark.gpu

SPEC = """
name: crosscheck_gpu
description: GPU cases far from launch overhead
defaults:
  dtypes: [float32]
  backends: [eager]
  cache: [{cache}]
  timing_modes: [launch]
benchmarks:
  - name: copy
    op: copy
    devices: [cuda]
    params: {{n: 67108864}}
  - name: gemm
    op: matmul
    devices: [cuda]
    dtypes: [bfloat16]
    params: {{m=n=k: 4096}}
"""


def _needs(peer: PeerName) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from rooflab.runners.machine.environment import capture

    _env, device = capture("cuda:0")
    reason = make_peer(peer).unavailable_reason(device)
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("peer, cache", [
    (PeerName.TORCH, "hot"), (PeerName.CUPYX, "hot"), (PeerName.NVBENCH, "hot"), (PeerName.NVBENCH, "cold"),
    (PeerName.DO_BENCH, "cold"),
])
def test_gpu_peer_agrees_in_the_same_cache_mode(tmp_path: Path, peer: PeerName, cache: str) -> None:
    _needs(peer)
    spec = tmp_path / "gpu.yaml"
    spec.write_text(SPEC.format(cache=cache))
    report = run_crosscheck(str(spec), db_url=f"sqlite:///{tmp_path / 'x.db'}", device="cuda:0", peers=peer.value,
                            rounds=3, command_line="test")
    checks = [c for c in report.checks if c.peer == peer.value]
    assert len(checks) == 2 and all(c.status == "ok" for c in checks), checks
    for c in checks:
        assert c.peer_cache == cache
        assert c.ratio is not None and c.in_mode_ratio is not None
        assert 0.9 <= c.ratio <= 1.1, (c.case_key, c.ratio, c.rooflab_median_ms, c.peer_median_ms)
        assert 0.98 <= c.in_mode_ratio <= 1.02, (c.case_key, c.peer_mode, c.in_mode_median_ms, c.peer_median_ms)


def test_do_bench_is_cold_even_for_a_hot_case(tmp_path: Path) -> None:
    _needs(PeerName.DO_BENCH)
    spec = tmp_path / "gpu.yaml"
    spec.write_text(SPEC.format(cache="hot"))
    report = run_crosscheck(str(spec), db_url=f"sqlite:///{tmp_path / 'x.db'}", device="cuda:0", peers="do_bench",
                            rounds=2, command_line="test", filters=["op=copy"])
    (c,) = report.checks
    assert c.status == "ok" and c.peer_cache == "cold"
    # 768 MiB of traffic does not fit in any L2: cold and hot differ little, and never in do_bench's favour
    assert c.ratio is not None and c.ratio <= 1.05
