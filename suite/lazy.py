"""torch for the op modules, imported when an op first uses it, not when the op is looked up.

Reports ask ops for facts (`reads_only`, fusion chains, unfused bytes) through the registry; with a
plain `import torch` at the top of every op module, drawing a report imported torch (about 200 MB
and over a second) without ever running an op. `LazyModule` imports its module on the first
attribute read and then puts the real module in its place in every rooflab module that holds it:
the timed callables read `torch.*` on every call, and a read through a module subclass with
`__getattr__` costs about 100 ns more than one on the module itself (3 % of a 4.5 us CPU call).

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
                names = getattr(holder, "__dict__", {})
                for key in [k for k, v in list(names.items()) if v is self]:  # a copy: others may import
                    names[key] = module
        return getattr(module, attr)


if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:
    torch = LazyModule("torch")
    F = LazyModule("torch.nn.functional")
