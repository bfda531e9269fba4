"""One benchmark case: the unit that is measured, stored and compared.

A `Case` is what spec expansion produces and what a worker measures. Its `case_key` is the
identity under which results are stored and compared across runs, machines and versions, so it
is built only from the fields that decide what is measured, in a canonical order.

What is measured: the op (and its version), backend, dtype, cache mode, timing mode, a
collective's mode (`collective_mode`: stream or isolated, None for every other family) and the op's
params. A collective's mode is a field of the case, never one of its params; a spec names it among
the params (`params: {mode: isolated}`), and its key and its stored params spell it `mode=isolated`
as they did before it was a field: `split_mode` and `params_in_key` are the two ends.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CACHE_MODES, TIMING_MODES, CacheMode, CollectiveMode, TimingMode, allowed

COLLECTIVE = "collective"  # the family whose cases carry a collective mode
FAMILIES = ("pointwise", "reduction", "gemm", "attention", "layer", "overhead", "probe", COLLECTIVE)
# how a spec's params, a `--filter` and the case key spell a collective's mode (`mode: isolated`)
MODE_PARAM = "mode"
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


def split_mode(family: str, params: Mapping[str, ParamValue]) -> tuple[dict[str, ParamValue], CollectiveMode | None]:
    """A case's params and its collective mode, from params that may name the mode (a spec's
    `params: {mode: isolated}`): a collective's mode is the one named, else stream; any other family
    has none, and its params are returned as they are (an op of its own may take a `mode` parameter)."""
    if family != COLLECTIVE:
        return dict(params), None
    rest = {name: value for name, value in params.items() if name != MODE_PARAM}
    return rest, CollectiveMode(str(params.get(MODE_PARAM, CollectiveMode.STREAM)))


def params_in_key(params: Mapping[str, ParamValue], collective_mode: CollectiveMode | None) -> dict[str, ParamValue]:
    """The params a case key (and the stored case) reads: the case's params, and a collective's mode
    under MODE_PARAM unless it is stream, the default, which stays out so that stream cases keep the
    keys collectives had before the modes existed (and isolated ones the `mode=isolated` they had as
    a parameter)."""
    if collective_mode is None or collective_mode is CollectiveMode.STREAM:
        return dict(params)
    return {**params, MODE_PARAM: collective_mode.value}


def _checked_mode(family: str, params: Mapping[str, ParamValue], mode: CollectiveMode | str | None
                  ) -> CollectiveMode | None:
    """A case's collective mode as the enum (stream when a collective leaves it out), or ValueError for
    a mode on a case of another family, or a collective that names its mode among its params."""
    if family != COLLECTIVE:
        if mode is not None:
            raise ValueError(f"collective_mode {mode!r} on a case of family {family!r}: only a collective has one")
        return None
    if MODE_PARAM in params:
        raise ValueError(f"a collective case's mode is its collective_mode field, not the param "
                         f"{MODE_PARAM!r} (suite.case.split_mode reads it out of a spec's params)")
    if mode is None:
        return CollectiveMode.STREAM
    try:
        return CollectiveMode(mode)
    except ValueError:
        raise ValueError(f"collective_mode {mode!r}: allowed: {allowed(CollectiveMode)}") from None


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
    collective_mode: CollectiveMode | None = None,
) -> str:
    """Stable identity, e.g. `matmul.v1:eager:bfloat16:cold:launch:k=4096,m=4096,n=4096`; a
    collective's mode is in it as `mode=isolated` among the params, except stream (`params_in_key`)."""
    params_text = canonical_params(params_in_key(params, collective_mode))
    return f"{op}.v{op_version}:{backend}:{dtype}:{cache}:{timing_mode}:{params_text}"


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
    # a collective's mode: stream (the default, filled in when a collective leaves it out) or
    # isolated; None for every other family (keyword only, so that it can stand with the modes)
    collective_mode: CollectiveMode | None = field(default=None, kw_only=True)
    params: Mapping[str, ParamValue]
    benchmark: str = ""  # name of the spec entry it came from
    tags: tuple[str, ...] = ()
    timing: TimingSettings = field(default_factory=TimingSettings)
    # fraction of device memory the inputs may use; None means no memory constraint
    max_memory_fraction: float | None = None

    def __post_init__(self) -> None:
        # the one place a case's collective mode is set: the enum, stream by default for a collective
        object.__setattr__(self, "collective_mode", _checked_mode(self.family, self.params, self.collective_mode))

    @property
    def case_key(self) -> str:
        return make_case_key(
            self.op, self.op_version, self.backend, self.dtype, self.cache, self.timing_mode, self.params,
            self.collective_mode,
        )

    @property
    def key_params(self) -> dict[str, ParamValue]:
        """The params its key reads and the database keeps (`params_in_key`): a collective's mode among them."""
        return params_in_key(self.params, self.collective_mode)

    def params_json(self) -> str:
        return json.dumps(dict(sorted(self.params.items())), sort_keys=True)

    def describe(self) -> str:
        """Short human label for progress lines."""
        return (f"{self.op} {self.backend} {self.dtype} {self.cache}/{self.timing_mode} "
                f"{canonical_params(self.key_params)}")
