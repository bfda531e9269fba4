"""A plugin op for the cross-check tests (ROOFLAB_PLUGINS=tests.runners.crosscheck_ops).

    planted_sometimes_slow  y = 2 x, correct; one call in `every` also spins for `sleep_ms`.

rooflab's median of single calls sees the fast calls (three in four by default); a peer that
averages blocks of calls sees fast + sleep / every. As configured the two are far apart (the
difference of method, `sample: per call / block mean`); rooflab timed in the peer's mode (block
means) must agree with the peer. (With one slow call in two, the median of an even number of
samples is itself the mean of a fast and a slow call, so both timers would report the same
figure: the plant needs the slow calls to be a minority.) The slow call spins on the clock rather
than sleeping: a sleep's wake-up on a loaded 2-core machine comes late by a varying amount, which
the two timers' block means would carry differently.
"""
from __future__ import annotations

import time
from typing import Any

import torch

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import Op, Params, ParamSpec, Prepared
from rooflab.suite.ops.registry import register


class PlantedSometimesSlow(Op):
    name = "planted_sometimes_slow"
    family = "pointwise"
    version = 1
    params = {
        "n": ParamSpec(int, 4096, "elements"),
        "sleep_ms": ParamSpec(float, 2.0, "sleep of a slow call (ms)"),
        "every": ParamSpec(int, 4, "one call in this many is slow"),
    }
    backends = ("eager",)
    dtypes = ("float32",)
    timing_modes = ("launch",)

    def flops(self, params: Params, dtype: str) -> int:
        return int(params["n"])

    def bytes(self, params: Params, dtype: str) -> int:
        return 2 * 4 * int(params["n"])

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return 2 * 4 * int(params["n"])

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        params = self.resolved_params(case.params)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = (torch.rand(int(params["n"]), generator=gen, dtype=torch.float32) + 0.5).to(device.torch_device)
        y = torch.empty_like(x)
        reference = x.double().cpu() * 2.0
        sleep_s = float(params["sleep_ms"]) / 1e3
        every = int(params["every"])
        calls = [0]

        def fn() -> torch.Tensor:
            calls[0] += 1
            if calls[0] % every == 0:
                end = time.perf_counter() + sleep_s
                while time.perf_counter() < end:
                    pass
            torch.mul(x, 2.0, out=y)
            return y

        def check(out: Any) -> str | None:
            err = (out.double().cpu() - reference).abs().max().item()
            return None if err <= 1e-6 else f"max abs error {err:.3g} against the float64 reference (allowed 1e-6)"

        return Prepared(fn=fn, check=check, graph_safe=False)


register(PlantedSometimesSlow)
