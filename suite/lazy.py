"""torch for the op modules, imported when an op first uses it, not when the op is looked up.

Reports ask ops for facts (`reads_only`, fusion chains, unfused bytes) through the registry; with a
plain `import torch` at the top of every op module, drawing a report imported torch (about 200 MB
and over a second) without ever running an op. `LazyModule` imports its module on the first
attribute read and then puts the real module in its place in every rooflab module that holds it:
the timed callables read `torch.*` on every call, and a read through a module subclass with
`__getattr__` costs about 100 ns more than one on the module itself (3 % of a 4.5 us CPU call).
A module outside rooflab (an op plugin) that reads through it gets the real module the same way,
in the module that made the read.

Op modules write `from rooflab.suite.lazy import F, torch`; a type checker sees the real modules.
"""
from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any


class LazyModule(ModuleType):
    """Stands for the module `name` until an attribute is read; then the module takes its place."""

    def __getattr__(self, attr: str) -> Any:  # only for names not held here: every read before the import
        module = importlib.import_module(self.__name__)
        for name, holder in list(sys.modules.items()):
            if name == "rooflab" or name.startswith("rooflab."):
                _put(getattr(holder, "__dict__", {}), self, module)
        # and in the module that read through it, whoever's it is (an op plugin written like the
        # built-in ops): without this, each of its later reads would scan sys.modules again (~0.5 ms)
        _put(sys._getframe(1).f_globals, self, module)
        return getattr(module, attr)


def _put(names: dict[str, Any], stand_in: LazyModule, module: ModuleType) -> None:
    """`module` in place of `stand_in` under every name of `names` that holds it."""
    for key in [k for k, v in list(names.items()) if v is stand_in]:  # a copy: others may import
        names[key] = module


if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:
    torch = LazyModule("torch")
    F = LazyModule("torch.nn.functional")
