"""The registry of ops: built-in ops plus ops registered by users or by plugin modules.

On first access the built-in op modules are imported, then every module named in the
environment variable ROOFLAB_PLUGINS (comma-separated importable module names); a plugin
registers its ops by calling `register` at import time. Because loading happens on first access
(not at import of this module), a freshly spawned worker process that inherits ROOFLAB_PLUGINS
sees the same ops as its parent.
"""
from __future__ import annotations

import importlib
import os
import threading

from rooflab.errors import UserError
from rooflab.suite.ops.base import Op, declares_bytes

PLUGINS_ENV = "ROOFLAB_PLUGINS"
BUILTIN_MODULES = (
    "rooflab.suite.ops.pointwise",
    "rooflab.suite.ops.reduction",
    "rooflab.suite.ops.gemm",
    "rooflab.suite.ops.attention",
    "rooflab.suite.ops.layer",
    "rooflab.suite.ops.overhead",
    "rooflab.suite.ops.probes",
    "rooflab.suite.ops.elementary",
    "rooflab.suite.ops.collective",
    "rooflab.suite.ops.pairs",
)

_ops: dict[str, Op] = {}
_loaded = False
_loading = False
_plugins_loaded: set[str] = set()
_lock = threading.RLock()


class PluginImportError(UserError, ImportError):
    """A module named in ROOFLAB_PLUGINS does not import (the CLI prints it and exits with code 2)."""


def register(op: Op | type[Op], *, replace: bool = False) -> Op:
    """Add an op (an instance, or a class that is instantiated without arguments) and return it.

    A second op under a taken name raises ValueError unless `replace` is true.
    """
    instance = op() if isinstance(op, type) else op
    if not isinstance(instance, Op):
        raise TypeError(f"register() needs an Op subclass or instance, got {type(instance).__name__}")
    if not declares_bytes(instance):
        raise TypeError(f"op {instance.name!r} declares no byte model: define bytes_read and bytes_written "
                        "(or bytes)")
    name = instance.name
    with _lock:
        if name in _ops and not replace and type(_ops[name]) is not type(instance):
            raise ValueError(f"an op named {name!r} is already registered ({type(_ops[name]).__name__})")
        _ops[name] = instance
    return instance


def plugin_modules() -> list[str]:
    """Module names listed in ROOFLAB_PLUGINS, in order."""
    raw = os.environ.get(PLUGINS_ENV, "")
    return [part.strip() for part in raw.split(",") if part.strip()]


def _ensure_loaded() -> None:
    """Import the built-in op modules once, and every plugin module named in ROOFLAB_PLUGINS that
    has not been imported yet (the variable is read on each access, so a plugin named after the
    first access is still loaded)."""
    global _loaded, _loading
    if _loaded and all(module in _plugins_loaded for module in plugin_modules()):
        return
    with _lock:
        if _loading:
            return
        _loading = True
        try:
            if not _loaded:
                for module in BUILTIN_MODULES:
                    importlib.import_module(module)
                _loaded = True
            for module in plugin_modules():
                if module in _plugins_loaded:
                    continue
                try:
                    importlib.import_module(module)
                except Exception as exc:  # name the variable and the module, keep the cause
                    raise PluginImportError(
                        f"{PLUGINS_ENV}: cannot import plugin module {module!r}: {exc}"
                        " (set ROOFLAB_PLUGINS to importable module names, comma-separated, or unset it)"
                    ) from exc
                _plugins_loaded.add(module)
        finally:
            _loading = False


def get_op(name: str) -> Op:
    """The op registered under `name`; KeyError listing the known names otherwise."""
    _ensure_loaded()
    try:
        return _ops[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(_ops))}") from None


def all_ops() -> dict[str, Op]:
    """Every registered op by name, sorted by name."""
    _ensure_loaded()
    return {name: _ops[name] for name in sorted(_ops)}


def builtin_ops() -> dict[str, Op]:
    """The ops rooflab itself defines (those registered by plugins or users left out)."""
    return {name: op for name, op in all_ops().items() if type(op).__module__ in BUILTIN_MODULES}
