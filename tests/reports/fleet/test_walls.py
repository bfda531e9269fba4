"""Which wall a case tells (reports/fleet/walls.py)."""
from __future__ import annotations

import pytest

from rooflab.reports.fleet.walls import FLEET_WALLS, wall_of
from rooflab.suite.spec import expand, load_spec
from rooflab.vocab import CeilingKind


@pytest.mark.parametrize(("op", "family", "cache", "wall"), [
    ("stream_copy", "probe", "cold", CeilingKind.HBM_RW),
    ("stream_triad", "probe", "cold", CeilingKind.HBM_RW),
    ("stream_dot", "probe", "cold", CeilingKind.HBM_RO),  # reads only
    ("sum", "reduction", "cold", CeilingKind.HBM_RO),
    ("copy", "pointwise", "hot", CeilingKind.L2),
    ("matmul", "gemm", "hot", CeilingKind.MATRIX),
    ("fma_intensity", "probe", "cold", CeilingKind.VECTOR),
    ("elementary", "probe", "cold", CeilingKind.ELEMENTARY),
    ("launch", "overhead", "hot", CeilingKind.LAUNCH),
    ("all_reduce", "collective", "hot", CeilingKind.INTERCONNECT),
    ("attention", "attention", "cold", None),
    ("transformer_block", "layer", "cold", None),
])
def test_the_wall_of_a_case(op: str, family: str, cache: str, wall: CeilingKind | None) -> None:
    assert wall_of(op, family, cache) == wall


def test_every_case_of_the_health_spec_tells_a_wall() -> None:
    for kind in ("cuda", "cpu"):
        walls = {wall_of(c.op, c.family, c.cache) for c in expand(load_spec("health"), kind)}
        assert None not in walls and walls <= set(FLEET_WALLS)
    gpu = {wall_of(c.op, c.family, c.cache) for c in expand(load_spec("health"), "cuda")}
    assert gpu == {CeilingKind.HBM_RW, CeilingKind.MATRIX, CeilingKind.ELEMENTARY, CeilingKind.LAUNCH,
                   CeilingKind.INTERCONNECT}
