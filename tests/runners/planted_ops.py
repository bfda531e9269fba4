"""Ops with planted faults, loaded as a plugin (ROOFLAB_PLUGINS=tests.runners.planted_ops).

Each op is small and runs on the CPU; the fault sits in the timed callable (or in its check), so
the worker has prepared real inputs before the fault hits:

    planted_scale  correct: y = 2 x (param sleep_ms > 0 makes each call that slow)
    planted_raise  the call raises RuntimeError                     -> failed
    planted_oom    the call raises torch.OutOfMemoryError           -> failed
    planted_exit   the call ends the process with os._exit(3)       -> crashed (exit code 3)
    planted_segv   the call reads address 0 (a real segfault)       -> crashed (SIGSEGV)
    planted_wrong  the call returns 2 x with one element off        -> incorrect
    planted_allocate  the call asks a GPU for twice its memory      -> failed (a real CUDA OOM)
    planted_hang   the call never returns                            -> crashed (timed out)
    planted_gate   correct, but each call waits for the test to open its gate (below)
    planted_huge   needs 2**60 bytes; prepare must never be reached -> skipped
    planted_uncapturable  prepared with graph_safe=False             -> skipped in graph mode
    planted_split  a copy whose byte model is right in total (2·n·s) and wrong on each side (1.5·n·s
                   read, 0.5·n·s written): the counters must flag both sides
"""
from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.lazy import torch
from rooflab.suite.ops.base import Op, Params, ParamSpec, Prepared
from rooflab.suite.ops.pointwise import Copy
from rooflab.suite.ops.registry import register
from tests.runners.gate import GATE_ENV, GATE_LIMIT_S


class _Planted(Op):
    family = "pointwise"
    version = 1
    params = {
        "n": ParamSpec(int, 4096, "elements"),
        "sleep_ms": ParamSpec(float, 0.0, "sleep inside each call (ms)", positive=False),
    }
    backends = ("eager",)
    dtypes = ("float32",)
    timing_modes = ("launch", "graph")

    def flops(self, params: Params, dtype: str) -> int:
        return int(params["n"])

    def bytes(self, params: Params, dtype: str) -> int:
        return 2 * 4 * int(params["n"])

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return 2 * 4 * int(params["n"])

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch.mul(x, 2.0, out=y)
        return y

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        params = self.resolved_params(case.params)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = (torch.rand(int(params["n"]), generator=gen, dtype=torch.float32) + 0.5).to(device.torch_device)
        y = torch.empty_like(x)
        reference = x.double().cpu() * 2.0
        sleep_s = float(params["sleep_ms"]) / 1e3

        def fn() -> torch.Tensor:
            if sleep_s:
                time.sleep(sleep_s)
            return self.fault(x, y)

        def check(out: Any) -> str | None:
            err = (out.double().cpu() - reference).abs().max().item()
            return None if err <= 1e-6 else f"max abs error {err:.3g} against the float64 reference (allowed 1e-6)"

        return Prepared(fn=fn, check=check, graph_safe=True)


class PlantedScale(_Planted):
    name = "planted_scale"


class PlantedRaise(_Planted):
    name = "planted_raise"

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("planted failure in the timed call")


class PlantedOom(_Planted):
    name = "planted_oom"

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (planted)")


class PlantedExit(_Planted):
    name = "planted_exit"

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        os._exit(3)


class PlantedSegv(_Planted):
    name = "planted_segv"

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)
        return y


class PlantedWrong(_Planted):
    name = "planted_wrong"

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch.mul(x, 2.0, out=y)
        y[len(y) // 2] += 0.25
        return y


class PlantedAllocate(_Planted):
    """Asks the device for twice its memory inside the call: a real out-of-memory error."""

    name = "planted_allocate"

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            total = torch.cuda.get_device_properties(x.device).total_memory
            torch.empty(2 * total, dtype=torch.uint8, device=x.device)
        raise RuntimeError("planted_allocate needs a CUDA device")


class PlantedHang(_Planted):
    name = "planted_hang"

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        while True:
            time.sleep(1.0)


class PlantedGate(_Planted):
    """Correct, but each call of the case with n elements first writes `waiting-<n>` into the folder
    named by $ROOFLAB_TEST_GATE, then waits until `open-<n>` or `open` (every case) exists there (at
    most GATE_LIMIT_S, then it raises): a test keeps a run inside a chosen case for exactly as long as
    it needs, whatever the machine's load, then lets it go."""

    name = "planted_gate"

    def fault(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gate, n = Path(os.environ[GATE_ENV]), len(x)
        (gate / f"waiting-{n}").touch()
        deadline = time.monotonic() + GATE_LIMIT_S
        while not ((gate / f"open-{n}").exists() or (gate / "open").exists()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"planted_gate: {gate}/open-{n} did not appear within {GATE_LIMIT_S:.0f} s")
            time.sleep(0.01)
        torch.mul(x, 2.0, out=y)
        return y


class PlantedHuge(_Planted):
    name = "planted_huge"

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return 2**60

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        raise AssertionError("planted_huge must be skipped before prepare")


class PlantedUncapturable(_Planted):
    """Correct, but declares that its call cannot be captured in a CUDA graph."""

    name = "planted_uncapturable"

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        prepared = super().prepare(case, device, seed)
        prepared.graph_safe = False
        return prepared


class PlantedSplit(Copy):
    """A copy whose split is wrong on each side and right in total (the module docstring)."""

    name = "planted_split"

    def bytes_read(self, params: Params, dtype: str) -> int:
        return super().bytes_read(params, dtype) * 3 // 2

    def bytes_written(self, params: Params, dtype: str) -> int:
        return super().bytes_written(params, dtype) // 2


for _op in (
    PlantedScale, PlantedRaise, PlantedOom, PlantedExit, PlantedSegv, PlantedWrong, PlantedAllocate, PlantedHang,
    PlantedGate, PlantedHuge, PlantedUncapturable, PlantedSplit,
):
    register(_op)
