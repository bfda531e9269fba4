"""Small fake ops for the spec tests (the spec only reads an op's metadata and pure functions).

Also importable from a subprocess (`tests.suite.spec_fakes`) to check case_key stability.
"""
from __future__ import annotations

import json
import sys
from typing import ClassVar

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import Op, Params, ParamSpec, Prepared


class _FakeOp(Op):
    def flops(self, params: Params, dtype: str) -> int:
        return 0

    def bytes(self, params: Params, dtype: str) -> int:
        return 0

    def memory_bytes(self, params: Params, dtype: str) -> int:
        return 0

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        raise NotImplementedError("fake ops are never run")


class FakeCopy(_FakeOp):
    name: ClassVar[str] = "copy"
    family: ClassVar[str] = "pointwise"
    version: ClassVar[int] = 2
    params: ClassVar[dict[str, ParamSpec]] = {"n": ParamSpec(int, help="elements")}
    backends: ClassVar[tuple[str, ...]] = ("eager", "compiled")
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "float16", "bfloat16")

    def flops(self, params: Params, dtype: str) -> int:
        return 0

    def bytes(self, params: Params, dtype: str) -> int:
        return 2 * int(params["n"]) * (2 if dtype != "float32" else 4)


class FakeMatmul(_FakeOp):
    name: ClassVar[str] = "matmul"
    family: ClassVar[str] = "gemm"
    params: ClassVar[dict[str, ParamSpec]] = {
        "m": ParamSpec(int),
        "n": ParamSpec(int),
        "k": ParamSpec(int),
        "batch": ParamSpec(int, default=1),
    }
    backends: ClassVar[tuple[str, ...]] = ("eager", "compiled", "cupy")
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "tf32", "float16", "bfloat16")
    timing_modes: ClassVar[tuple[str, ...]] = ("launch",)

    def flops(self, params: Params, dtype: str) -> int:
        return 2 * int(params["m"]) * int(params["n"]) * int(params["k"]) * int(params["batch"])


class FakeAttention(_FakeOp):
    name: ClassVar[str] = "attention"
    family: ClassVar[str] = "attention"
    params: ClassVar[dict[str, ParamSpec]] = {
        "batch": ParamSpec(int, default=4),
        "heads": ParamSpec(int, default=16),
        "seq_q": ParamSpec(int),
        "seq_k": ParamSpec(int),
        "head_dim": ParamSpec(int, default=64, choices=(64, 128)),
        "causal": ParamSpec(bool, default=False),
        "kernel": ParamSpec(str, default="sdpa_math", choices=("sdpa_flash", "sdpa_math", "naive")),
        "dropout": ParamSpec(float, default=0.1, positive=False),
    }
    backends: ClassVar[tuple[str, ...]] = ("eager",)
    dtypes: ClassVar[tuple[str, ...]] = ("float16", "bfloat16", "float32")


FAKE_OPS: dict[str, Op] = {op.name: op for op in (FakeCopy(), FakeMatmul(), FakeAttention())}


def main() -> None:
    """Print the case keys of the spec at argv[1], expanded with the fake ops, as JSON."""
    from rooflab.suite.spec import expand, load_spec

    spec = load_spec(sys.argv[1], ops=FAKE_OPS)
    print(json.dumps([c.case_key for c in expand(spec, ops=FAKE_OPS)]))


if __name__ == "__main__":
    main()
