"""The one place reports read the database: results frames via db.query."""
from __future__ import annotations

import pandas as pd


def load_results(url: str) -> pd.DataFrame:
    """Every result in the database at `url`; an empty frame when nothing has been stored there yet."""
    from db.query import results
    from db.schema import read_state

    if read_state(url).kind == "empty":
        return pd.DataFrame()
    return results(url)
