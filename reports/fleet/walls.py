"""Which wall of a device a case tells: the fleet judges each device wall by wall.

The walls are the measured roofs rooflab already tells (rooflab/vocab.py `CeilingKind`): a cold
stream or pointwise case tells the memory's bandwidth (read-write, or read-only for an op that only
reads), a hot one the cache's; a GEMM the matrix units; the FMA-intensity probe the vector units;
the elementary probe the elementary-function units; the launch probe the launch floor; a collective
the interconnect. A case that tells none of them alone (attention, a transformer layer) is judged
case by case in its evidence but counts toward no wall.
"""
from __future__ import annotations

from enum import StrEnum

from rooflab.reports.data.op_facts import reads_only
from rooflab.suite.ops.pairs import PAIRS_OP
from rooflab.vocab import CacheMode, CeilingKind

# the walls in the order a fleet's table shows them
FLEET_WALLS: tuple[CeilingKind, ...] = (
    CeilingKind.HBM_RW, CeilingKind.HBM_RO, CeilingKind.L2, CeilingKind.MATRIX, CeilingKind.VECTOR,
    CeilingKind.ELEMENTARY, CeilingKind.LAUNCH, CeilingKind.INTERCONNECT,
)


class LinkWall(StrEnum):
    """A device's place among the ends of the night's link matrices (link_walls.py): a wall of the
    fleet that is not a roof, so no CeilingKind; it is shown after the roofs' walls."""

    LINK = "link"


LINK_WALL = LinkWall.LINK
WALL_ORDER: tuple[str, ...] = (*(str(w) for w in FLEET_WALLS), LINK_WALL)
_STREAMING_FAMILIES = ("pointwise", "reduction")
_STREAM_PROBES = ("stream_copy", "stream_scale", "stream_add", "stream_triad", "stream_dot")


def wall_of(op: str, family: str, cache: str) -> CeilingKind | None:
    """The wall a case (its op, family and cache mode) tells, or None when it tells none alone. A pair
    of the link matrix tells none of the device that stored it (rank 0's): its two ends are judged
    together with every other pair (reports/fleet/links.py, `rooflab fleet --links`), and the ends
    that are devices of the night get a `link` wall of their own (link_walls.py)."""
    if op == PAIRS_OP:
        return None
    if family == "collective":
        return CeilingKind.INTERCONNECT
    if op == "launch":
        return CeilingKind.LAUNCH
    if op == "elementary":
        return CeilingKind.ELEMENTARY
    if op == "fma_intensity":
        return CeilingKind.VECTOR
    if family == "gemm":
        return CeilingKind.MATRIX
    if op in _STREAM_PROBES or family in _STREAMING_FAMILIES:
        if cache == CacheMode.HOT:
            return CeilingKind.L2
        return CeilingKind.HBM_RO if reads_only(op) else CeilingKind.HBM_RW
    return None
