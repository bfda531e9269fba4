"""Load a script under scripts/ as a module, for the tests of its CPU-safe parts."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = str(ROOT / "scripts")


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as the module `name` (registered in sys.modules: dataclasses look their
    module up by name), loaded once per process; scripts/ goes on the path, where the loan's
    modules import their siblings from (as when run as `python scripts/NAME.py`)."""
    if name in sys.modules:
        return sys.modules[name]
    if SCRIPTS not in sys.path:
        sys.path.append(SCRIPTS)
    return _load(name)


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
