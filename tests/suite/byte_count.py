"""Count the bytes a torch callable reads and writes, by watching every aten op it dispatches.

`count_bytes(fn)` runs `fn()` under a TorchDispatchMode and sorts each tensor an op touches by the
storage it lives in and what the call did to that storage first:

- a storage that existed before the call and was first *read* holds an input: each distinct view
  of it that the call read counts as read (an in-place op, a read-modify-write, reads and writes;
  `copy_`, `fill_` and `zero_` only write);
- a storage that the call *wrote*, and that the call returns, or that existed before and was not
  read again after the write, holds an output: each distinct view written counts as written (a
  returned tensor the call allocated counts at its own size);
- what the call allocated and did not return, and a storage that existed before but was written
  and then read back without being returned (a scratch buffer the call was handed), is an
  intermediate: not counted, as the op models' minimum bytes do not count it.

A view's bytes are its distinct elements (a broadcast dimension, stride 0, counts once) times the
element size; two views are the same when they start at the same place of the same storage and span
as much of it. View ops (transpose, reshape, expand, ...) move nothing and are not counted. A result
of no dimension (a scalar) is not counted: the models leave a scalar result out (stream_dot).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

ViewKey = tuple[int, int, int, torch.dtype]
# in-place ops that overwrite `self` without reading it
OVERWRITES = frozenset({"aten.copy_.default", "aten.fill_.Scalar", "aten.fill_.Tensor", "aten.zero_.default"})


def _view(t: torch.Tensor) -> tuple[ViewKey, int]:
    """(where the view lies in its storage, its distinct bytes)."""
    extent = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
    distinct = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            distinct *= size
    key = (t.untyped_storage().data_ptr(), int(t.storage_offset()), extent if t.numel() else 0, t.dtype)
    return key, distinct * t.element_size() if t.numel() else 0


@dataclass
class _Storage:
    fresh: bool  # allocated by the call
    first_read: bool  # the call's first access read it
    read: dict[ViewKey, int] = field(default_factory=dict)
    written: dict[ViewKey, int] = field(default_factory=dict)
    read_after_write: bool = False


def _tensors(value: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


class _Watch(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, _Storage] = {}
        self.ops: list[str] = []

    def _touch(self, t: torch.Tensor, *, read: bool, write: bool, fresh: bool = False) -> None:
        key, nbytes = _view(t)
        if key[0] == 0:  # nothing allocated (an empty tensor)
            return
        s = self.storages.get(key[0])
        if s is None:
            s = self.storages[key[0]] = _Storage(fresh=fresh, first_read=read)
        if read:
            s.read[key] = nbytes
            s.read_after_write = s.read_after_write or bool(s.written)
        if write:
            s.written[key] = nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.ops.append(str(func))
        schema = func._schema
        if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            return out  # a view: moves nothing
        overwrites = str(func) in OVERWRITES
        positional = [a for a in schema.arguments if not a.kwarg_only]
        given = {a.name: v for a, v in zip(positional, args, strict=False)} | dict(kwargs)
        for argument in schema.arguments:
            writes = argument.alias_info is not None and argument.alias_info.is_write
            for t in _tensors(given.get(argument.name)):
                # an `out=` argument is only written; an in-place `self` is read and written
                self._touch(t, read=not (writes and (argument.kwarg_only or overwrites)), write=writes)
        known = set(self.storages)
        for t in _tensors(out):
            if t.untyped_storage().data_ptr() not in known:
                self._touch(t, read=False, write=True, fresh=True)
        return out


@dataclass(frozen=True)
class Counted:
    read: int
    written: int
    ops: tuple[str, ...] = ()


def count_bytes(fn: Callable[[], Any]) -> Counted:
    """The bytes `fn()` reads and writes (module docstring)."""
    watch = _Watch()
    with watch:
        result = fn()
    returned: dict[int, dict[ViewKey, int]] = {}
    for t in _tensors(result):
        if t.dim() > 0:
            key, nbytes = _view(t)
            returned.setdefault(key[0], {})[key] = nbytes
    read = written = 0
    for ptr, s in watch.storages.items():
        if s.first_read and not s.fresh:
            read += sum(s.read.values())
        if ptr in returned:
            written += sum(returned[ptr].values()) if s.fresh else sum(s.written.values())
        elif s.written and not s.fresh and not s.read_after_write:
            written += sum(s.written.values())
    return Counted(read, written, tuple(watch.ops))
