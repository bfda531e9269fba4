"""One benchmark case: the unit that is measured, stored and compared.

A `Case` is what spec expansion produces and what a worker measures. Its `case_key` is the
identity under which results are stored and compared across runs, machines and versions, so it
is built only from the fields that decide what is measured, in a canonical order.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CACHE_MODES, TIMING_MODES, CacheMode, TimingMode

FAMILIES = ("pointwise", "reduction", "gemm", "attention", "layer", "overhead", "probe", "collective")
# eager, compiled and cupy run one device's kernels; gloo and nccl are the distributed backends a
# collective (family collective) runs on: gloo over loopback on a CPU, NCCL across GPUs
BACKENDS = ("eager", "compiled", "cupy", "gloo", "nccl")
# dtypes as torch spells them, plus `tf32`: float32 GEMM on tensor cores.
DTYPES = (
    "float64",
    "float32",
    "tf32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "int8",
    "int32",
)



def mode_conflict(cache: str, timing_mode: str) -> str | None:
    """Why a cache mode cannot go with a timing mode, or None. One rule: a graph replays N launches
    with no flush between them, so only the first of them would be cold; and a cold launch sample
    is device time already (the stream is held while it is enqueued), so a graph has nothing to add."""
    if cache == CacheMode.COLD and timing_mode == TimingMode.GRAPH:
        return (
            "cache mode cold cannot be timed in graph mode: a graph replays its launches back to back "
            "with no flush between them, so only the first would be cold; use cache hot with graph, "
            "or timing mode launch with cold (its samples are device time too)"
        )
    return None


def modes_problem(cache: str, timing_mode: str) -> str | None:
    """Why `cache` and `timing_mode` cannot be timed together (a mode that does not exist, or the
    conflict of `mode_conflict`), or None: the one check of the Python API and the timing engine."""
    if cache not in CACHE_MODES:
        return f"cache {cache!r}: allowed: {', '.join(CACHE_MODES)}"
    if timing_mode not in TIMING_MODES:
        return f"timing_mode {timing_mode!r}: allowed: {', '.join(TIMING_MODES)}"
    return mode_conflict(cache, timing_mode)

ParamValue = int | float | bool | str


def canonical_params(params: Mapping[str, ParamValue]) -> str:
    """`k=v` pairs sorted by name; booleans as true/false; floats in repr form."""
    parts = []
    for name in sorted(params):
        value = params[name]
        if isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        parts.append(f"{name}={text}")
    return ",".join(parts)


def make_case_key(
    op: str,
    op_version: int,
    backend: str,
    dtype: str,
    cache: str,
    timing_mode: str,
    params: Mapping[str, ParamValue],
) -> str:
    """Stable identity, e.g. `matmul.v1:eager:bfloat16:cold:launch:k=4096,m=4096,n=4096`."""
    return f"{op}.v{op_version}:{backend}:{dtype}:{cache}:{timing_mode}:{canonical_params(params)}"


@dataclass(frozen=True)
class Case:
    """Everything about one case that the worker needs and the database keeps."""

    op: str
    op_version: int
    family: str
    backend: str
    dtype: str
    cache: str
    timing_mode: str
    params: Mapping[str, ParamValue]
    benchmark: str = ""  # name of the spec entry it came from
    tags: tuple[str, ...] = ()
    timing: TimingSettings = field(default_factory=TimingSettings)
    # fraction of device memory the inputs may use; None means no memory constraint
    max_memory_fraction: float | None = None

    @property
    def case_key(self) -> str:
        return make_case_key(
            self.op, self.op_version, self.backend, self.dtype, self.cache, self.timing_mode, self.params
        )

    def params_json(self) -> str:
        return json.dumps(dict(sorted(self.params.items())), sort_keys=True)

    def describe(self) -> str:
        """Short human label for progress lines."""
        return f"{self.op} {self.backend} {self.dtype} {self.cache}/{self.timing_mode} {canonical_params(self.params)}"
