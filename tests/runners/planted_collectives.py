"""Collectives with planted faults on one rank, loaded as a plugin
(ROOFLAB_PLUGINS=tests.runners.planted_collectives). Each is a real all_reduce on gloo whose fault
sits on rank `bad_rank` (param, default 1), in the timed callable after `after` calls (param,
default 0: at the first call), so the group has prepared, checked and timed before it hits:

    planted_coll_wrong   the rank's output has one element off         -> incorrect, that rank named
    planted_coll_raise   the rank raises RuntimeError                    -> failed, that rank named
    planted_coll_die     the rank ends its process with os._exit(3)      -> crashed (exit code 3)
    planted_coll_hang    the rank sleeps for an hour before its call     -> crashed (timed out)
    planted_coll_slow    the rank sleeps `slow_ms` after each collective -> ok, slowest rank = that rank
    planted_pairs_wrong  the link matrix (sendrecv_pairs), the rank sending one element off -> every pair it
                         sends in incorrect, naming the rank that received it; the other pairs ok
    planted_node_slow    an all_reduce whose ranks on the Slurm node `slow_node` (SLURMD_NODENAME) sleep
                         `slow_ms` after each call                    -> ok, that node's groups slower
    planted_pairs_fault  the link matrix, the rank `bad_rank` faulting at its first call of round
                         `bad_round` (1 = the first): `fault` die (os._exit(3)) or hang (an hour's
                         sleep)                          -> the rounds before stored, the matrix crashed

With ROOFLAB_PLANTED_MARK set to a folder, the faulty rank writes its pid into
`<folder>/<op>-rank<r>.pid` as its fault hits, so that a test can act on it then (kill it mid-case).
"""
from __future__ import annotations

import os
import time
from typing import Any

from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import Params, ParamSpec
from rooflab.suite.ops.collective import AllReduce, Group, PreparedCollective
from rooflab.suite.ops.pairs import PreparedPairs, SendRecvPairs
from rooflab.suite.ops.registry import register


class _Planted(AllReduce):
    params = {
        **AllReduce.params,
        "bad_rank": ParamSpec(int, 1, "the rank with the fault", positive=False),
        "after": ParamSpec(int, 0, "calls before the fault hits", positive=False),
        "slow_ms": ParamSpec(float, 5.0, "planted_coll_slow: sleep after each collective (ms)"),
    }

    def fault(self, out: Any, p: Params) -> Any:
        """What this planted op does to the faulty rank's output (each subclass plants its own)."""
        raise TypeError(f"{type(self).__name__} plants no fault")

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        prepared = super().build(case, device, seed, group, p)
        if group.rank != int(p["bad_rank"]):
            return prepared
        inner, calls = prepared.fn, [0]

        def fn() -> Any:
            calls[0] += 1
            if calls[0] > int(p["after"]):
                _mark(self.name, group.rank)
                return self.fault(inner, p)
            return inner()

        prepared.fn = fn
        return prepared


def _mark(op: str, rank: int) -> None:
    folder = os.environ.get("ROOFLAB_PLANTED_MARK")
    if folder:
        path = os.path.join(folder, f"{op}-rank{rank}.pid")
        with open(path + ".tmp", "w", encoding="ascii") as fh:
            fh.write(str(os.getpid()))
        os.replace(path + ".tmp", path)


class Wrong(_Planted):
    name = "planted_coll_wrong"

    def fault(self, inner: Any, p: Params) -> Any:
        out = inner()
        out[3] += 1
        return out


class Raise(_Planted):
    name = "planted_coll_raise"

    def fault(self, inner: Any, p: Params) -> Any:
        raise RuntimeError("planted fault on this rank")


class Die(_Planted):
    name = "planted_coll_die"

    def fault(self, inner: Any, p: Params) -> Any:
        os._exit(3)


class Hang(_Planted):
    name = "planted_coll_hang"

    def fault(self, inner: Any, p: Params) -> Any:
        time.sleep(3600)
        return inner()


class Slow(_Planted):
    name = "planted_coll_slow"

    def fault(self, inner: Any, p: Params) -> Any:
        out = inner()
        time.sleep(float(p["slow_ms"]) / 1e3)
        return out


class PairsWrong(SendRecvPairs):
    name = "planted_pairs_wrong"
    params = {**SendRecvPairs.params, "bad_rank": ParamSpec(int, 1, "the rank that sends wrong values", positive=False)}

    def inputs(self, count: int, case: Case, device: DeviceInfo, seed: int, group: Group) -> Any:
        x = super().inputs(count, case, device, seed, group)
        if group.rank == int(case.params["bad_rank"]):
            x[3] += 1
        return x


class PairsFault(SendRecvPairs):
    name = "planted_pairs_fault"
    params = {**SendRecvPairs.params,
              "bad_rank": ParamSpec(int, 1, "the rank with the fault", positive=False),
              "bad_round": ParamSpec(int, 2, "the round it faults in (1: the first)"),
              "fault": ParamSpec(str, "die", "die or hang", choices=("die", "hang"), positive=False)}

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedPairs:
        prepared = super().build(case, device, seed, group, p)
        at = int(p["bad_round"]) - 1
        call = prepared.calls[at] if group.rank == int(p["bad_rank"]) and at < len(prepared.calls) else None
        if call is None:
            return prepared
        name, fault = self.name, str(p["fault"])

        def fn() -> Any:
            _mark(name, group.rank)
            if fault == "die":
                os._exit(3)
            time.sleep(3600)

        call.fn = fn
        return prepared


class NodeSlow(AllReduce):
    name = "planted_node_slow"
    params = {**AllReduce.params,
              "slow_node": ParamSpec(str, "n2", "the Slurm node whose ranks sleep", positive=False),
              "slow_ms": ParamSpec(float, 2.0, "the sleep after each call (ms)")}

    def build(self, case: Case, device: DeviceInfo, seed: int, group: Group, p: Params) -> PreparedCollective:
        prepared = super().build(case, device, seed, group, p)
        if os.environ.get("SLURMD_NODENAME") != p["slow_node"]:
            return prepared
        inner = prepared.fn

        def fn() -> Any:
            out = inner()
            time.sleep(float(p["slow_ms"]) / 1e3)
            return out

        prepared.fn = fn
        return prepared


for _op in (Wrong, Raise, Die, Hang, Slow, PairsWrong, PairsFault, NodeSlow):
    register(_op)
