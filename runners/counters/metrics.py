"""The metrics rooflab asks of Nsight Compute, and what each becomes in a counter reading.

Every metric is a `.sum` over the whole GPU, and over all the kernels of the profiled call (the
parser adds the kernels up), in base units (`--print-units base`): bytes, nanoseconds, or a count.

- DRAM: `dram__bytes_read.sum`, `dram__bytes_write.sum`: bytes that crossed the DRAM interface.
- L2: `lts__t_bytes.sum`: bytes of every request the L2 slices served (hits and misses, reads,
  writes and atomics): the traffic between the SMs and the L2, not DRAM traffic.
- Time: `gpu__time_duration.sum`: each kernel's duration, summed.
- FLOPs, per precision p in d (fp64), f (fp32), h (fp16 and bf16): the thread-level SASS instruction
  counts `smsp__sass_thread_inst_executed_op_{p}add_pred_on.sum`, `..._{p}mul_...`, `..._{p}fma_...`;
  FLOPs = add + mul + 2·fma (predicated-off threads are not counted).
- Tensor cores: `sm__inst_executed_pipe_tensor.sum`, warp-level instructions issued to the tensor
  pipe: not FLOPs (their width depends on the instruction and the architecture).
- Instructions: `smsp__inst_executed.sum` (all warp-level instructions) and
  `smsp__inst_executed_pipe_xu.sum` (those of the transcendental and conversion unit, where
  cos, exp and friends run their special-function instructions): what an op's model does not count.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
L2_TRAFFIC = "lts__t_bytes.sum"
KERNEL_TIME = "gpu__time_duration.sum"
TENSOR = "sm__inst_executed_pipe_tensor.sum"
INSTRUCTIONS = "smsp__inst_executed.sum"
XU_INSTRUCTIONS = "smsp__inst_executed_pipe_xu.sum"

# precision -> (add, mul, fma) metric names; the letter is SASS's (d: fp64, f: fp32, h: fp16/bf16)
def _sass(op: str) -> str:
    return f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"


FLOP_METRICS: dict[str, tuple[str, str, str]] = {
    precision: (_sass(f"{letter}add"), _sass(f"{letter}mul"), _sass(f"{letter}fma"))
    for precision, letter in (("fp64", "d"), ("fp32", "f"), ("fp16", "h"))
}

METRICS: tuple[str, ...] = (
    DRAM_READ, DRAM_WRITE, L2_TRAFFIC, KERNEL_TIME,
    *(name for names in FLOP_METRICS.values() for name in names),
    TENSOR, INSTRUCTIONS, XU_INSTRUCTIONS,
)
NS_PER_MS = 1e6


def _int(values: Mapping[str, float], name: str) -> int | None:
    value = values.get(name)
    return None if value is None else int(round(value))


def flops(values: Mapping[str, float], precision: str) -> int | None:
    """add + mul + 2·fma of one precision; None when any of the three was not reported."""
    add, mul, fma = (values.get(name) for name in FLOP_METRICS[precision])
    if add is None or mul is None or fma is None:
        return None
    return int(round(add + mul + 2 * fma))


def quantities(values: Mapping[str, float]) -> dict[str, Any]:
    """The counter reading's fields (db.counters.CounterRecord) from metric sums; None where a metric
    was not reported."""
    kernel_ns = values.get(KERNEL_TIME)
    return {
        "kernel_ms": None if kernel_ns is None else kernel_ns / NS_PER_MS,
        "dram_read_bytes": _int(values, DRAM_READ),
        "dram_write_bytes": _int(values, DRAM_WRITE),
        "l2_traffic_bytes": _int(values, L2_TRAFFIC),
        "fp64_flops": flops(values, "fp64"),
        "fp32_flops": flops(values, "fp32"),
        "fp16_flops": flops(values, "fp16"),
        "tensor_instructions": _int(values, TENSOR),
    }
