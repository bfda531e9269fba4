"""rooflab: a GPU microbenchmark suite with a results database.

The four packages live at the top of the repository (`suite/`, `runners/`, `db/`, `reports/`) and
import as `rooflab.suite`, `rooflab.runners`, `rooflab.db` and `rooflab.reports`. An installed
wheel holds them under `rooflab/`; in a checkout used in place (the offline bootstrap, or
`PYTHONPATH=.`), the repository root is added to this package's search path so that the same names
resolve to the folders at the top.
"""
from __future__ import annotations

from pathlib import Path

_here = Path(__file__).resolve().parent
_checkout = _here.parent
if not (_here / "suite").is_dir() and (_checkout / "suite" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # noqa: F821 - a package's __path__ is defined by the import system
