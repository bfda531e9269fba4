"""The peers rooflab knows, by name, and the `--peers` list parsed against them.

PEERS is the registry: a peer's name and where its class lives (`module:Class`, imported when the
peer is made). A kernel peer implements runners.crosscheck.peer.Peer, a collective peer
runners.crosscheck.peer.CollectivePeer; adding a peer is its module, its name in PeerName and its
line here.
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence

from rooflab.runners.crosscheck.peer import CollectivePeer, Peer, PeerName
from rooflab.runners.errors import UserInputError

PEERS: dict[PeerName, str] = {
    PeerName.TORCH: "torch_peer:TorchTimerPeer",
    PeerName.DO_BENCH: "do_bench_peer:DoBenchPeer",
    PeerName.NVBENCH: "nvbench_peer:NvbenchPeer",
    PeerName.CUPYX: "cupyx_peer:CupyxPeer",
    PeerName.DIST_LOOP: "dist_loop_peer:DistLoopPeer",
    PeerName.NCCL_TESTS: "nccl_tests_peer:NcclTestsPeer",
}
ALL_PEERS: tuple[PeerName, ...] = tuple(PEERS)
AnyPeer = Peer | CollectivePeer


def make_peer(name: PeerName) -> AnyPeer:
    module, cls = PEERS[name].split(":")
    peer: AnyPeer = getattr(importlib.import_module(f"rooflab.runners.crosscheck.{module}"), cls)()
    return peer


def parse_peers(text: str | None) -> list[PeerName]:
    """`all` (or nothing) -> every peer; else a comma-separated list of peer names."""
    if text is None or text.strip().lower() in ("", "all"):
        return list(ALL_PEERS)
    names: list[PeerName] = []
    for part in (p.strip().lower() for p in text.split(",")):
        if not part:
            continue
        try:
            name = PeerName(part)
        except ValueError:
            raise UserInputError(
                f"--peers {text!r}: unknown peer {part!r}; allowed: all, or a list of {', '.join(ALL_PEERS)}"
            ) from None
        if name not in names:
            names.append(name)
    if not names:
        raise UserInputError(f"--peers {text!r}: name at least one peer (allowed: all, {', '.join(ALL_PEERS)})")
    return names


def peers_for(names: Sequence[PeerName]) -> list[AnyPeer]:
    return [make_peer(n) for n in names]
