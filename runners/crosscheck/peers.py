"""The peers rooflab knows, by name, and the `--peers` list parsed against them."""
from __future__ import annotations

from collections.abc import Sequence

from rooflab.runners.crosscheck.cupyx_peer import CupyxPeer
from rooflab.runners.crosscheck.do_bench_peer import DoBenchPeer
from rooflab.runners.crosscheck.nvbench_peer import NvbenchPeer
from rooflab.runners.crosscheck.peer import Peer, PeerName
from rooflab.runners.crosscheck.torch_peer import TorchTimerPeer
from rooflab.runners.errors import UserInputError

ALL_PEERS: tuple[PeerName, ...] = tuple(PeerName)


def make_peer(name: PeerName) -> Peer:
    return {
        PeerName.TORCH: TorchTimerPeer,
        PeerName.DO_BENCH: DoBenchPeer,
        PeerName.NVBENCH: NvbenchPeer,
        PeerName.CUPYX: CupyxPeer,
    }[name]()


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


def peers_for(names: Sequence[PeerName]) -> list[Peer]:
    return [make_peer(n) for n in names]
