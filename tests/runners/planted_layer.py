"""A transformer block with one part made artificially slow, loaded as a plugin
(ROOFLAB_PLUGINS=tests.runners.planted_layer).

transformer_block_slow_part is transformer_block (same work model: the model does not know) whose
part `slow_part` repeats its own kind of work `slow_repeats` more times inside its range, in the
timed and in the profiled call alike: `activation` runs GELU again on a tensor of the activation's
shape (bandwidth-bound work), `qkv` runs the QKV matmul again (compute-bound work).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import ParamSpec
from rooflab.suite.ops.layer import TransformerBlock
from rooflab.suite.ops.layer_model import block_shape
from rooflab.suite.ops.registry import register

SLOWABLE = ("activation", "qkv")


class SlowPartBlock(TransformerBlock):
    name = "transformer_block_slow_part"
    params = {
        **TransformerBlock.params,
        "slow_part": ParamSpec(str, "activation", "the part made slow", choices=SLOWABLE, positive=False),
        "slow_repeats": ParamSpec(int, 20, "extra repetitions of the part's work"),
    }

    def marks(self, case: Case, device: DeviceInfo) -> tuple[Callable[[str], Any], Callable[[str], Any]]:
        # torch here, where the case runs, not at the module's top: a run's supervisor loads the plugin
        # to expand its spec and need not import torch for it (as the built-in ops, suite/lazy.py)
        import torch
        import torch.nn.functional as F

        timed, profiled = super().marks(case, device)
        p = self.p(case.params)
        s = block_shape(p)
        part, repeats = str(p["slow_part"]), int(p["slow_repeats"])
        gen = torch.Generator().manual_seed(3)
        dtype = getattr(torch, case.dtype)
        if part == "activation":
            u = torch.randn((s.tokens, s.up_width), generator=gen).to(dtype)

            def extra() -> None:
                F.gelu(u)
        else:
            a = torch.randn((s.tokens, s.hidden), generator=gen).to(dtype)
            w = torch.randn((s.hidden, 3 * s.hidden), generator=gen).to(dtype)

            def extra() -> None:
                torch.mm(a, w)

        def slowed(mark: Callable[[str], Any]) -> Callable[[str], Any]:
            @contextlib.contextmanager
            def enter(name: str) -> Iterator[None]:
                with mark(name):
                    if name == part:
                        for _ in range(repeats):
                            extra()
                    yield

            return enter

        return slowed(timed), slowed(profiled)


register(SlowPartBlock)
