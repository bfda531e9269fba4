"""Collectives: the communication wall, measured the way nccl-tests reports it.

(About 400 lines on purpose: the six collectives' work models, each with where its factor comes
from, read best side by side against nccl-tests' table; their data and checks are in
collective_data.py.)

One op per collective of torch.distributed: all_reduce, all_gather, reduce_scatter, broadcast,
all_to_all and send_recv. A case runs in a group of `ranks` processes (runners/orchestration/ranks.py),
one device each: NCCL over the GPUs of a node (backend `nccl`), gloo over loopback on a CPU
(backend `gloo`, every rank on the CPU). Its params: `n`, the elements each rank contributes (what
nccl-tests calls the count), and `ranks`, the world size (an integer of at least 2, or `all`: every
GPU of the run on CUDA, CPU_ALL_RANKS processes on a CPU).

The work model is nccl-tests' (its `src/*.cu` files, each collective's GetBw function, and its
doc/PERFORMANCE.md, which explains the factors). With t the time of one collective and N the ranks:

- algbw = S / t, where S is the size of the operation as nccl-tests counts it;
- busbw = algbw x factor, the factor chosen so that busbw can be held against the bandwidth of one
  link whatever N is: it is the fraction of S that each rank must send over its link in the
  bandwidth-optimal (ring) algorithm.

| op | S (bytes) | factor | FLOPs (the reduction's adds) |
|---|---|---|---|
| all_reduce | n·s | 2(N-1)/N | (N-1)·n |
| all_gather | n·s·N (the gathered output) | (N-1)/N | 0 |
| reduce_scatter | n·s·N (each rank's input) | (N-1)/N | (N-1)·n·N |
| all_to_all | n·s·N (each rank's send buffer: n to every rank) | (N-1)/N | 0 |
| broadcast | n·s | 1 | 0 |
| send_recv | n·s | 1 | 0 |

An op's `bytes` is S x factor ("bus bytes", rounded to a whole byte), so that the stored `gbps`
(bytes / median) is the busbw; algbw = busbw / factor (`algbw_gbps`). FLOPs count the adds of the
whole group once: every element of a sum of N vectors takes N-1 adds (a ring spreads them over the
ranks, each doing (N-1)/N of them); they are a property of the op, not a roof it is held against.

Inputs are seeded per rank and are small nonzero integers (`values`), so that every sum the
collective forms is exact in float32, float16 and bfloat16 whatever order the backend adds in: each
rank checks its output against the exact expected values, regenerated from every rank's seed, and
any difference makes the case incorrect. all_reduce (and reduce_scatter in place) overwrite their
input: their prepared case has a `reset` that restores it before each sample, outside the timed
region, so values never grow towards infinity over thousands of samples.

Modes: collectives are timed hot (nothing is flushed: the buffers live in device memory and the
interconnect is what is measured, as in nccl-tests) and in launch mode. How the calls are timed is
the case's collective mode (`Case.collective_mode`, a vocab.CollectiveMode;
runners/engine/group_timing.py): `stream` (the default, nccl-tests' method: N calls back to back
under one clock per rank, that clock / N, the ranks' figures averaged) or `isolated` (a barrier,
then one call per sample, the slowest rank's time). A spec names it among the params (`mode`,
declared here as MODE so that a spec's value is checked like any other); spec expansion moves it
into the case's field (suite.case.split_mode), so an op never reads it from its params. The two are
different measurements, so the mode is in the case key, except at its default: `stream` cases keep
the keys that collectives had before the modes existed, and the series keep the two apart by the
results' `collective_mode` and `pace` (reports/regressions/series.py). The `pace` timing setting
does not apply (`paces`): a collective's samples follow from its mode.
torch.distributed has only an in-place all_reduce and broadcast and only out-of-place all_to_all and
send/recv; all_gather and reduce_scatter take `inplace` (the input a slice of the output, or the
output a slice of the input, as nccl-tests' in-place runs).
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from rooflab.suite.case import COLLECTIVE, MODE_PARAM, Case, ParamValue
from rooflab.suite.device import DeviceInfo
from rooflab.suite.dtypes import element_size, torch_dtype
from rooflab.suite.lazy import torch
from rooflab.suite.ops.base import Op, Params, ParamSpec, ParamValueError, Prepared
from rooflab.suite.ops.collective_data import (
    Expected,
    blocks,
    check_exact,
    exact_magnitude,
    fill,
    input_of,
    rank_key,
    summed,
)
from rooflab.suite.ops.registry import register
from rooflab.vocab import CacheMode, CollectiveMode, Pace, TimingMode

FAMILY = COLLECTIVE
BACKENDS = ("gloo", "nccl")
CPU_ALL_RANKS = 2  # `ranks: all` on a CPU: a fixed small group (loopback, every rank on the CPU)
ALL = "all"


@dataclass(frozen=True)
class RanksSpec(ParamSpec):
    """`ranks`: a world size of at least `least` (an integer), or `all`."""

    least: int = 2

    def allowed_text(self) -> str:
        return f"an integer >= {self.least}, or all"

    def check(self, value: Any, name: str, op: str) -> ParamValue:
        if isinstance(value, str) and value.strip().lower() == ALL:
            return ALL
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        least = self.least
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ParamValueError(f"{name} of op {op!r} must be an integer >= {least} or all, got {value!r}")
        return value


# the spec's spelling of the case's collective mode (suite.case.MODE_PARAM): checked and swept like a
# parameter, then moved into `Case.collective_mode` (suite.case.split_mode); left out of the key at stream
MODE = ParamSpec(
    str, CollectiveMode.STREAM.value,
    "how the calls are timed: stream (nccl-tests' method: N calls back to back under one clock, / N, the "
    "ranks averaged) or isolated (a barrier, then one call per sample, the slowest rank's time)",
    choices=tuple(m.value for m in CollectiveMode), positive=False, in_key_at_default=False,
)


def world_size(ranks: ParamValue, *, all_ranks: int = CPU_ALL_RANKS) -> int:
    """The group size a `ranks` value stands for: the integer, or `all_ranks` for `all` (the run
    knows how many GPUs it has; the pure models, `rooflab list` and shard costs use the CPU group)."""
    if ranks == ALL:
        return int(all_ranks)
    return int(ranks)


def at_world_size(case: Case, size: int) -> Case:
    """`case` with its `ranks` at the world size its group runs it at (`ranks: all` resolved to the
    run's GPUs, or to the ranks of a Slurm step): what its memory and work models must read, since
    they take `all` as the CPU's group of CPU_ALL_RANKS. Only for the models: results keep the key
    of `case` itself."""
    return replace(case, params={**case.params, "ranks": int(size)})


@dataclass
class PreparedCollective(Prepared):
    """A collective ready to time on one rank: `fn` runs it once; `reset` (or None) restores the
    inputs `fn` overwrote, called before each sample outside the timed region."""

    reset: Callable[[], Any] | None = None


@dataclass(frozen=True)
class Group:
    """Where this process stands in its group."""

    rank: int
    size: int


def current_group() -> Group:
    """The rank and size of the process group this process belongs to."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "collective ops run in a group of rank processes (rooflab run starts one); "
            "torch.distributed is not initialised in this process"
        )
    return Group(dist.get_rank(), dist.get_world_size())


def _dist() -> Any:
    import torch.distributed as dist

    return dist


class CollectiveOp(Op):
    """A collective of torch.distributed; see the module docstring for the model."""

    family = FAMILY
    backends: ClassVar[tuple[str, ...]] = BACKENDS
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "float16", "bfloat16")
    timing_modes: ClassVar[tuple[str, ...]] = (TimingMode.LAUNCH,)
    cache_modes: ClassVar[tuple[str, ...]] = (CacheMode.HOT,)
    paces: ClassVar[tuple[str, ...]] = (Pace.BACK_TO_BACK,)  # the setting's default only: the mode decides
    params: ClassVar[dict[str, ParamSpec]] = {
        "n": ParamSpec(int, 1 << 20, "elements per rank (nccl-tests' count)"),
        "ranks": RanksSpec(int, ALL, "world size: an integer >= 2, or all (every GPU of the run; 2 on a CPU)"),
        MODE_PARAM: MODE,
    }
    size_ranks: ClassVar[bool] = False  # S counts n·s·N (all_gather, reduce_scatter, all_to_all), else n·s
    cpu_all_ranks: ClassVar[int] = CPU_ALL_RANKS  # the rank processes `ranks: all` starts on a CPU
    reduces: ClassVar[bool] = False  # forms sums (all_reduce, reduce_scatter)

    # -- the model (pure) ----------------------------------------------------------------------

    def world(self, params: Params) -> int:
        return world_size(self.with_defaults(params)["ranks"])

    def factor(self, ranks: int) -> float:
        """busbw / algbw for a group of `ranks` (nccl-tests' factor)."""
        return (ranks - 1) / ranks

    def size_bytes(self, params: Params, dtype: str) -> int:
        """S: the operation's size as nccl-tests counts it (algbw = S / t)."""
        p = self.with_defaults(params)
        per_rank = int(p["n"]) * element_size(dtype)
        return per_rank * world_size(p["ranks"]) if self.size_ranks else per_rank

    def bytes(self, params: Params, dtype: str) -> int:
        """Bus bytes S x factor, rounded to a whole byte: bytes / time is nccl-tests' busbw."""
        return round(self.size_bytes(params, dtype) * self.factor(self.world(params)))

    def flops(self, params: Params, dtype: str) -> int:
        if not self.reduces:
            return 0
        p = self.with_defaults(params)
        ranks = world_size(p["ranks"])
        outputs = int(p["n"]) * (ranks if self.size_ranks else 1)
        return (ranks - 1) * outputs

    def algbw_gbps(self, busbw_gbps: float, ranks: int) -> float:
        """nccl-tests' algbw from its busbw for a group of `ranks`."""
        return busbw_gbps / self.factor(ranks)

    def memory_bytes(self, params: Params, dtype: str) -> int:
        """Device memory of one rank (a CPU group's ranks share the host's: the runner multiplies)."""
        p = self.with_defaults(params)
        return self.buffer_elements(int(p["n"]), world_size(p["ranks"]), p) * element_size(dtype)

    @abstractmethod
    def buffer_elements(self, n: int, ranks: int, params: Params) -> int:
        """Elements one rank allocates (inputs, outputs, a pristine copy for `reset`)."""

    # -- running ---------------------------------------------------------------------------------

    def skip_reason(self, case: Case, device: DeviceInfo) -> str | None:
        dist = _dist()
        if not dist.is_available():
            return "this torch build has no torch.distributed"
        if case.backend == "nccl":
            if not device.is_cuda:
                return "backend nccl needs CUDA GPUs (on a CPU the collectives run on gloo)"
            if not dist.is_nccl_available():
                return "this torch build has no NCCL"
        if case.backend == "gloo":
            if device.is_cuda:
                return "backend gloo is measured on the CPU (on CUDA GPUs the collectives run on nccl)"
            if not dist.is_gloo_available():
                return "this torch build has no gloo"
        return None

    def prepare(self, case: Case, device: DeviceInfo, seed: int) -> PreparedCollective:
        group = current_group()
        p = self.with_defaults(case.params)
        ranks = group.size if p["ranks"] == ALL else world_size(p["ranks"])  # `all`: the group the run made
        if ranks != group.size:
            raise RuntimeError(f"{case.op} with ranks={p['ranks']} runs in a group of {group.size} processes")
        return self.build(case, device, seed, group, p)

    @abstractmethod
    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        """This rank's buffers and its one collective call, for the group `group`."""

    def empty(self, count: int, case: Case, device: DeviceInfo) -> torch.Tensor:
        return torch.empty(count, dtype=torch_dtype(case.dtype), device=device.torch_device)

    def inputs(self, count: int, case: Case, device: DeviceInfo, seed: int, group: Group) -> torch.Tensor:
        """This rank's seeded input of `count` elements."""
        x = self.empty(count, case, device)
        fill(x, rank_key(seed, group.rank), exact_magnitude(group.size))
        return x


    def expect(self, seed: int, group: Group, device: DeviceInfo, offset: int = 0) -> list[Expected]:
        """Every rank's input from element `offset` on, as the check regenerates it."""
        return [input_of(seed, q, group.size, offset, device.torch_device) for q in range(group.size)]

    def checker(self, expected: Expected, group: Group) -> Callable[[Any], str | None]:
        what = f"rank {group.rank} of {group.size}: {self.name} output"
        return lambda out: check_exact(out, expected, what)


REDUCE_OP = ParamSpec(str, "sum", "the reduction (nccl-tests' redop)", choices=("sum",), positive=False)
INPLACE = ParamSpec(bool, False, "in place: the input a slice of the output (all_gather) or the output a slice "
                    "of the input (reduce_scatter)", positive=False)


def _single(name: str) -> Any:
    """torch.distributed's `<name>_single` (torch 2.13), else the older `<name>_tensor` / `_into_tensor`."""
    dist = _dist()
    older = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor"}[name]
    return getattr(dist, f"{name}_single", None) or getattr(dist, older)


class AllReduce(CollectiveOp):
    """all_reduce (sum, in place): every rank ends with the sum of every rank's n elements.
    S = n·s, busbw = algbw x 2(N-1)/N; FLOPs (N-1)·n."""

    name = "all_reduce"
    params = {**CollectiveOp.params, "reduce_op": REDUCE_OP}
    reduces = True

    def factor(self, ranks: int) -> float:
        return 2 * (ranks - 1) / ranks

    def buffer_elements(self, n: int, ranks: int, params: Params) -> int:
        return 2 * n  # the buffer and its pristine copy

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        dist, n = _dist(), int(p["n"])
        x = self.inputs(n, case, device, seed, group)
        pristine = x.clone()

        def fn() -> Any:
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            return x

        return PreparedCollective(fn=fn, check=self.checker(summed(self.expect(seed, group, device)), group),
                                  graph_safe=False, reset=lambda: x.copy_(pristine))


class AllGather(CollectiveOp):
    """all_gather: every rank ends with every rank's n elements, in rank order.
    S = n·s·N, busbw = algbw x (N-1)/N; no FLOPs."""

    name = "all_gather"
    params = {**CollectiveOp.params, "inplace": INPLACE}
    size_ranks = True

    def buffer_elements(self, n: int, ranks: int, params: Params) -> int:
        return n * ranks + (0 if params.get("inplace") else n)

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        n, gather = int(p["n"]), _single("all_gather")
        out = self.empty(n * group.size, case, device)
        if p["inplace"]:
            x = out[group.rank * n:(group.rank + 1) * n]
            fill(x, rank_key(seed, group.rank), exact_magnitude(group.size))
        else:
            x = self.inputs(n, case, device, seed, group)

        def fn() -> Any:
            gather(out, x)
            return out

        return PreparedCollective(fn=fn, check=self.checker(blocks(n, self.expect(seed, group, device)), group),
                                  graph_safe=False)


class ReduceScatter(CollectiveOp):
    """reduce_scatter (sum): rank r ends with the sum over ranks of block r (n elements) of their
    n·N-element inputs. S = n·s·N, busbw = algbw x (N-1)/N; FLOPs (N-1)·n·N."""

    name = "reduce_scatter"
    params = {**CollectiveOp.params, "reduce_op": REDUCE_OP, "inplace": INPLACE}
    size_ranks = True
    reduces = True

    def buffer_elements(self, n: int, ranks: int, params: Params) -> int:
        return 2 * n * ranks if params.get("inplace") else n * ranks + n  # in place: the input's pristine copy

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        n, scatter = int(p["n"]), _single("reduce_scatter")
        x = self.inputs(n * group.size, case, device, seed, group)
        reset = None
        if p["inplace"]:
            out = x[group.rank * n:(group.rank + 1) * n]
            pristine = x.clone()
            reset = lambda: x.copy_(pristine)  # noqa: E731 - the output overwrote a block of the input
        else:
            out = self.empty(n, case, device)

        def fn() -> Any:
            scatter(out, x)
            return out

        expected = summed(self.expect(seed, group, device, offset=group.rank * n))
        return PreparedCollective(fn=fn, check=self.checker(expected, group), graph_safe=False, reset=reset)


class AllToAll(CollectiveOp):
    """all_to_all: rank r sends block q (n elements) of its n·N-element input to rank q and ends
    with block r of every rank, in rank order. S = n·s·N, busbw = algbw x (N-1)/N; no FLOPs."""

    name = "all_to_all"
    size_ranks = True

    def buffer_elements(self, n: int, ranks: int, params: Params) -> int:
        return 2 * n * ranks

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        dist, n = _dist(), int(p["n"])
        x = self.inputs(n * group.size, case, device, seed, group)
        out = self.empty(n * group.size, case, device)

        def fn() -> Any:
            dist.all_to_all_single(out, x)
            return out

        expected = blocks(n, self.expect(seed, group, device, offset=group.rank * n))
        return PreparedCollective(fn=fn, check=self.checker(expected, group), graph_safe=False)


class Broadcast(CollectiveOp):
    """broadcast from rank 0: every rank ends with rank 0's n elements (each rank starts from its
    own values, so a broadcast that moved nothing is caught). S = n·s, busbw = algbw; no FLOPs."""

    name = "broadcast"

    def factor(self, ranks: int) -> float:
        return 1.0

    def buffer_elements(self, n: int, ranks: int, params: Params) -> int:
        return n

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        dist = _dist()
        x = self.inputs(int(p["n"]), case, device, seed, group)

        def fn() -> Any:
            dist.broadcast(x, src=0)
            return x

        return PreparedCollective(fn=fn, check=self.checker(self.expect(seed, group, device)[0], group),
                                  graph_safe=False)


class SendRecv(CollectiveOp):
    """send_recv: every rank sends its n elements to the next rank and receives the previous
    rank's (a ring; two ranks swap), as nccl-tests' sendrecv. S = n·s, busbw = algbw; no FLOPs."""

    name = "send_recv"
    params = {**CollectiveOp.params,
              "ranks": RanksSpec(int, 2, "world size: an integer >= 2 (each rank sends to the next), or all")}

    def factor(self, ranks: int) -> float:
        return 1.0

    def buffer_elements(self, n: int, ranks: int, params: Params) -> int:
        return 2 * n

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        dist, n = _dist(), int(p["n"])
        x = self.inputs(n, case, device, seed, group)
        y = torch.zeros(n, dtype=torch_dtype(case.dtype), device=device.torch_device)
        after, before = (group.rank + 1) % group.size, (group.rank - 1) % group.size

        def fn() -> Any:
            ops = [dist.P2POp(dist.isend, x, after), dist.P2POp(dist.irecv, y, before)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            return y

        return PreparedCollective(fn=fn, check=self.checker(self.expect(seed, group, device)[before], group),
                                  graph_safe=False)


COLLECTIVE_OPS = (AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, SendRecv)
for _op in COLLECTIVE_OPS:
    register(_op)
