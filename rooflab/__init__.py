"""rooflab: a GPU microbenchmark suite with a results database.

The public Python API (rooflab/api.py; docs/python-api.md):

    rooflab.measure(fn, *, device=None, cache="cold", timing_mode="launch", **timing) -> MeasureResult
    rooflab.run(spec, db=...)                       -> RunSummary
    rooflab.results(db, ...), rooflab.runs(db), rooflab.history(case_key, db) -> pandas DataFrames
    rooflab.register(OpClass)                       -> adds a user's op to the registry
    rooflab.counters(spec, db=..., device="cuda:0")  -> each case's model against Nsight Compute's counters

They load on first use, so `import rooflab` stays cheap (no torch, pandas or SQLAlchemy).

The four packages live at the top of the repository (`suite/`, `runners/`, `db/`, `reports/`) and
import as `rooflab.suite`, `rooflab.runners`, `rooflab.db` and `rooflab.reports`. An installed
wheel holds them under `rooflab/`; in a checkout used in place (the offline bootstrap, or
`PYTHONPATH=.`), the repository root is added to this package's search path so that the same names
resolve to the folders at the top.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

_here = Path(__file__).resolve().parent
_checkout = _here.parent
if not (_here / "suite").is_dir() and (_checkout / "suite" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # noqa: F821 - a package's __path__ is defined by the import system

if TYPE_CHECKING:
    from rooflab.api import MachineState, MeasureResult, counters, history, measure, register, results, run, runs

__all__ = ["MachineState", "MeasureResult", "counters", "history", "measure", "register", "results", "run", "runs"]


def __getattr__(name: str) -> Any:
    """The API names, imported from rooflab.api on first access (PEP 562)."""
    if name in __all__:
        from rooflab import api  # on first access (PEP 562): `import rooflab` loads none of it

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rooflab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
