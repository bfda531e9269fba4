"""The report's Jinja2 environment and the filters its templates use (no plotting: the history's
side process renders its pages with it, without loading matplotlib)."""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

TEMPLATES = Path(__file__).with_name("templates")


@functools.cache
def environment() -> jinja2.Environment:
    """Templates from reports/pages/templates, autoescaped, strict about undefined names.

    One environment per process, so that each template is compiled once and kept (compiling a
    report's templates took 0.2 s of CPU, again for every report a process drew); it reloads a
    template whose file changed. Its filters are set here and nowhere else."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = num
    env.filters["fromjson"] = json_list
    env.filters["pct"] = lambda v: "" if missing(v) else f"{100 * float(v):.1f} %"
    return env


def json_list(v: Any) -> list:
    """A list column (quality_reasons) as a list: stored as JSON text, or already a list."""
    if isinstance(v, (list, tuple)):
        return list(v)
    if isinstance(v, str) and v:
        try:
            parsed = json.loads(v)
        except json.JSONDecodeError:
            return [v]
        return parsed if isinstance(parsed, list) else [str(parsed)]
    return []


def missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def num(v: Any, digits: int = 4) -> str:
    if missing(v):
        return ""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        f = float(v)
        if f == 0:
            return "0"
        if abs(f) >= 1e6 or abs(f) < 1e-3:
            return f"{f:.{digits - 1}e}"
        return f"{f:.{digits}g}"
    return str(v)
