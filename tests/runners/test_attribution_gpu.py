"""Attribution on a CUDA GPU with the real profiler: every part of a block gets its kernels and the
parts add up to the profiled whole. Run with `make test-gpu`."""
from __future__ import annotations

import pytest
import torch

from rooflab.runners.engine.attribution import CUDA_CLOCK, attribute
from rooflab.suite.case import Case
from rooflab.suite.ops.layer_model import PARTS_SUM_TOLERANCE
from rooflab.suite.ops.registry import get_op
from tests.cuda_device import cuda_device

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("extra", [{}, {"pass": "forward_backward", "activation": "swiglu", "norm": "rmsnorm"}])
def test_a_real_gpu_profile_of_the_block_splits_into_every_part_and_adds_up(extra: dict) -> None:
    device = cuda_device()
    op = get_op("transformer_block")
    case = Case("transformer_block", op.version, "layer", "eager", "bfloat16", "cold", "launch",
                {"batch": 2, "seq": 256, "hidden": 512, "heads": 8, "kernel": "sdpa_flash", **extra})
    prepared = op.prepare(case, device, seed=11)
    prepared.fn()
    torch.cuda.synchronize()
    profile, why = attribute(prepared, device)
    assert why is None and profile is not None, why
    assert profile.clock == CUDA_CLOCK and [p.name for p in profile.parts] == [m.name for m in prepared.part_models]
    assert all(p.events >= 1 and p.time_ms > 0 for p in profile.parts), [(p.name, p.events) for p in profile.parts]
    summed = sum(p.time_ms for p in profile.parts) + profile.unattributed_ms + profile.gap_ms - profile.overlap_ms
    assert abs(summed - profile.whole_ms) <= 1e-6 * max(profile.whole_ms, 1.0)
    assert profile.overlap_ms <= PARTS_SUM_TOLERANCE * profile.whole_ms
    assert 0 < profile.whole_ms <= profile.host_ms
