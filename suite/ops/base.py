"""The interface every op and probe implements.

An op knows, for given params and dtype: its exact FLOPs and minimum bytes (pure functions), the
memory it will need (estimated before anything is allocated), when it cannot run, and how to build
seeded random inputs, the timed callable and a check of that callable's output against a float64
reference. The runner never looks inside an op.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from rooflab.record import WorkModel
from rooflab.suite.case import Case, ParamValue
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import CACHE_MODES, TIMING_MODES, ElementaryFunction, SampleKind, TimingMode

Params = Mapping[str, ParamValue]

# Names of the torch.profiler ranges (record_function) that a `Prepared.profiled` call opens: one
# around the whole call, one around each part, named by the prefix and the part's name.
BLOCK_RANGE = "rooflab.block"
PART_RANGE_PREFIX = "rooflab.part:"


@dataclass(frozen=True)
class ParamSpec:
    """One parameter an op accepts: its type, default (None = required) and meaning."""

    type: type  # int, float, bool or str
    default: ParamValue | None = None
    help: str = ""
    choices: tuple[ParamValue, ...] | None = None  # allowed values, when the set is closed
    positive: bool = True  # numbers must be > 0 (sizes)
    # False for an option added after results were stored: at its default it is left out of the
    # case's params (and so of its case_key), which keeps the keys of existing cases unchanged
    in_key_at_default: bool = True

    def allowed_text(self) -> str:
        """What values are allowed, for a message: the choices, or the kind (with `> 0` for sizes)."""
        if self.choices is not None:
            return ", ".join(str(c).lower() if isinstance(c, bool) else str(c) for c in self.choices)
        kind = {int: "integers", float: "numbers", str: "strings", bool: "true, false"}.get(self.type, str(self.type))
        return f"{kind} > 0" if self.positive and self.type in (int, float) else kind

    def check(self, value: Any, name: str, op: str) -> ParamValue:
        """`value` checked against this parameter (type, choices, positivity) and in its type (an int
        for 2.0, a float for 2): the one check of an op parameter, for a spec and for `predict`.
        ParamValueError names the parameter, the op, what is wrong and what is allowed."""
        kind = self.type
        if kind is bool:
            if not isinstance(value, bool):
                raise ParamValueError(
                    f"wrong type: {name} of op {op!r} is a boolean, got {value!r}; allowed: true, false"
                )
        elif kind is int:
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                hint = ""
                if isinstance(value, str) and _is_number_text(value):
                    hint = " (YAML reads a number like 1e6 as text: write 1000000 or 1.0e+6)"
                raise ParamValueError(
                    f"wrong type: {name} of op {op!r} is an integer, got {value!r}{hint}; "
                    f"allowed: {self.allowed_text()}"
                )
        elif kind is float:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ParamValueError(
                    f"wrong type: {name} of op {op!r} is a number, got {value!r}; allowed: {self.allowed_text()}"
                )
            value = float(value)
        elif kind is str:
            if not isinstance(value, str):
                raise ParamValueError(
                    f"wrong type: {name} of op {op!r} is a string, got {value!r}; allowed: {self.allowed_text()}"
                )
        if self.choices is not None and value not in self.choices:
            raise ParamValueError(f"{value!r} is not a valid {name} for op {op!r}; allowed: {self.allowed_text()}")
        if self.positive and kind in (int, float) and value <= 0:
            raise ParamValueError(f"{name} must be positive (a size), got {value!r}; allowed: {self.allowed_text()}")
        return value


class ParamValueError(ValueError):
    """An op parameter's value is not one the op takes (the message says what is allowed)."""


def _is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class Part(Protocol):
    """One part of an op made of parts, as its profile is split (runners.engine.attribution): its name,
    its kind of work, its FLOPs and minimum bytes (suite.ops.layer_model.PartModel is one)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def flops(self) -> int: ...
    @property
    def bytes(self) -> int: ...


@dataclass
class Prepared:
    """A case ready to time: inputs are allocated and captured by `fn`."""

    fn: Callable[[], Any]  # the timed callable: one launch of the op on the prepared inputs
    check: Callable[[Any], str | None]  # output of fn -> None if correct, else what is wrong
    graph_safe: bool = True  # may be captured in a CUDA graph
    sync: Callable[[], None] | None = None  # extra synchronisation (e.g. CuPy's stream); None = torch's
    # ops made of parts (the transformer block): `fn` with a profiler range around the call and
    # each part (BLOCK_RANGE, PART_RANGE_PREFIX + name), and the parts' work models
    # (suite.ops.layer_model.PartModel) in the order they run; None / () for other ops
    profiled: Callable[[], Any] | None = None
    part_models: tuple[Part, ...] = ()


class Op(ABC):
    name: ClassVar[str]
    family: ClassVar[str]
    version: ClassVar[int] = 1  # bump when the op's meaning (work, inputs, FLOP/byte model) changes
    params: ClassVar[dict[str, ParamSpec]]
    backends: ClassVar[tuple[str, ...]]
    dtypes: ClassVar[tuple[str, ...]]
    timing_modes: ClassVar[tuple[str, ...]] = TIMING_MODES
    cache_modes: ClassVar[tuple[str, ...]] = CACHE_MODES
    paces: ClassVar[tuple[str, ...] | None] = None  # the `pace` settings it takes (None: any)
    sample_kind: ClassVar[SampleKind] = SampleKind.DEVICE_TIME  # what one sample measures
    # its bytes are nearly all reads (it writes a row or a scalar): held against the read-only HBM roof
    reads_only: ClassVar[bool] = False
    # a chain of kernels in eager form that a compiler may fuse into one: reports set its eager
    # result beside its compiled one (unfused_bytes is the eager chain's traffic)
    fusion_chain: ClassVar[bool] = False

    @abstractmethod
    def flops(self, params: Params, dtype: str) -> int:
        """Floating-point operations of one call (an FMA counts as 2)."""

    def bytes_read(self, params: Params, dtype: str) -> int | None:
        """Minimum bytes one call reads: each input once (an array the call reads and writes back, a
        read-modify-write, is counted here and in `bytes_written`). None: the op does not split its
        bytes (a collective, whose bytes are link bytes; an op written before the split)."""
        return None

    def bytes_written(self, params: Params, dtype: str) -> int | None:
        """Minimum bytes one call writes: each output once (see `bytes_read`)."""
        return None

    def bytes(self, params: Params, dtype: str) -> int:
        """Minimum DRAM traffic of one call: each input read once, each output written once; the sum
        of `bytes_read` and `bytes_written`. An op that does not split its bytes overrides this."""
        split = byte_split(self, params, dtype)
        if split is None:
            raise TypeError(f"op {self.name!r} declares no byte model: define bytes_read and bytes_written "
                            "(or bytes, for traffic that is not split into reads and writes)")
        return split[0] + split[1]

    @abstractmethod
    def memory_bytes(self, params: Params, dtype: str) -> int:
        """Device memory the case needs at its peak (inputs, outputs, temporaries), for the fit check."""

    def elementary(self, params: Params, dtype: str) -> dict[ElementaryFunction, int]:
        """Elementary functions of one call, by function (each is also one FLOP of `flops`): held
        against the device's elementary-function roofs by the diagnosis. {} for an op with none."""
        return {}

    def unfused_bytes(self, params: Params, dtype: str) -> int | None:
        """DRAM traffic of the unfused (eager, kernel by kernel) form, each kernel reading its inputs
        and writing its output once; None for an op that has no unfused form apart from `bytes`."""
        return None

    def skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        """The op's own reason why this case cannot run on this device (a missing package, a dtype
        one backend lacks), or None. The checks every op shares (backend, dtype and timing mode in
        the op's lists, graph mode on CUDA, memory) are `case_skip_reason`'s, which calls this."""
        return None

    @abstractmethod
    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> Prepared:
        """Allocate seeded random inputs on `device` and return the timed callable and its check."""

    def resolved_params(self, params: Params) -> dict[str, ParamValue]:
        """`params` as a case holds them: defaults filled in, in name order; an option whose
        ParamSpec has `in_key_at_default` False is left out while it is at its default."""
        out = {name: spec.default for name, spec in self.params.items() if spec.default is not None}
        out.update(params)
        for name, spec in self.params.items():
            if not spec.in_key_at_default and out.get(name) == spec.default:
                out.pop(name, None)
        return dict(sorted(out.items()))

    def with_defaults(self, params: Params) -> dict[str, ParamValue]:
        """`params` with every default filled in (what the op reads)."""
        out = {name: spec.default for name, spec in self.params.items() if spec.default is not None}
        out.update(params)
        return dict(sorted(out.items()))


def byte_split(op: Op, params: Params, dtype: str) -> tuple[int, int] | None:
    """(bytes read, bytes written) of one call of `op`, or None when the op does not split its bytes.
    The one place the two halves are asked for together: one declared without the other is an error."""
    read, written = op.bytes_read(params, dtype), op.bytes_written(params, dtype)
    if read is None and written is None:
        return None
    if read is None or written is None:
        raise TypeError(f"op {op.name!r} declares only one of bytes_read and bytes_written: declare both")
    return int(read), int(written)


def work_model(op: Op, params: Params, dtype: str) -> WorkModel:
    """The FLOPs and bytes of one call of `op` (read and written apart where the op splits them), from
    its pure functions: a measured result and an imported one get their work from here."""
    split = byte_split(op, params, dtype)
    read, written = split if split is not None else (None, None)
    return WorkModel(flops=int(op.flops(params, dtype)), bytes=int(op.bytes(params, dtype)),
                     bytes_read=read, bytes_written=written)


def declares_bytes(op: Op) -> bool:
    """Whether the class of `op` has a byte model: its own `bytes`, or `bytes_read` and `bytes_written`."""
    cls = type(op)
    split = cls.bytes_read is not Op.bytes_read and cls.bytes_written is not Op.bytes_written
    return cls.bytes is not Op.bytes or split


def format_bytes(n: float) -> str:
    """`1.50 GiB`, `12.00 MiB`, `64.00 KiB`: the largest binary unit the value reaches."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fits_reason(op: Op, case: Case, device: DeviceInfo) -> str | None:
    """Why the case's memory estimate exceeds what it may use of the device's memory (all of it, or
    the spec's max_memory_fraction of it), or None. A device that reports no memory size fits all."""
    if device.memory_bytes <= 0:
        return None
    need = int(op.memory_bytes(op.resolved_params(case.params), case.dtype))
    if case.max_memory_fraction is not None:
        allowed = case.max_memory_fraction * device.memory_bytes
        if need > allowed:
            return (
                f"would not fit: needs {format_bytes(need)}, more than max_memory_fraction "
                f"{case.max_memory_fraction:g} x {format_bytes(device.memory_bytes)} of device memory"
            )
    elif need > device.memory_bytes:
        return f"would not fit: needs {format_bytes(need)}, more than the device's {format_bytes(device.memory_bytes)}"
    return None


def case_skip_reason(op: Op, case: Case, device: DeviceInfo) -> str | None:
    """Can this case run on this device? The one decision, made before anything is allocated: the
    op's backends, dtypes and timing modes; graph timing needs CUDA; the op's own rules
    (`Op.skip_reason`); the memory estimate (`fits_reason`). None when the case may run."""
    if case.backend not in op.backends:
        return f"backend {case.backend} is not supported by {op.name} (supported: {', '.join(op.backends)})"
    if case.dtype not in op.dtypes:
        return f"dtype {case.dtype} is not supported by {op.name} (supported: {', '.join(op.dtypes)})"
    if case.timing_mode not in op.timing_modes:
        return f"timing mode {case.timing_mode} is not supported by {op.name} (supported: {', '.join(op.timing_modes)})"
    if case.timing_mode == TimingMode.GRAPH and not device.is_cuda:
        return "graph timing mode needs CUDA"
    return op.skip_reason(case, device) or fits_reason(op, case, device)
