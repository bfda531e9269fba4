"""The one place reports read the database: results frames via db.query."""
from __future__ import annotations

from typing import Sequence

import pandas as pd


def _empty(url: str) -> bool:
    from db.schema import read_state

    return read_state(url).kind == "empty"


def load_results(url: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Every result in the database at `url` (only `columns` of db.query.RESULT_COLUMNS when
    given); an empty frame when nothing has been stored there yet."""
    from db.query import results

    if _empty(url):
        return pd.DataFrame()
    return results(url, columns=columns)


def load_verdicts(url: str, window: int = 20, z_threshold: float = 4.0, min_change: float = 0.05) -> list:
    """The regression verdict of every series in the database at `url`, as `detect` gives them on
    every result, read from the newest runs (reports.regressions.detect_in_database); [] when
    nothing has been stored there yet."""
    from reports.regressions import detect_in_database

    if _empty(url):
        return []
    return detect_in_database(url, window=window, z_threshold=z_threshold, min_change=min_change)
