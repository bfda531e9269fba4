"""What the report reads beside the results: the cross-checks (db.crosscheck), the counter readings
(db.counters), the profiled blocks (db.layer_query) and the groups collectives ran in
(db.collectives), each an empty frame while nothing is stored. Apart from reports.data.reads, whose
readers (`rooflab regressions`, `history`, `compare`) need none of these modules.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from rooflab.db.collectives import collective_frame
from rooflab.db.counters import counters_frame
from rooflab.db.crosscheck import crosscheck_frame
from rooflab.db.handle import Db
from rooflab.db.layer_query import layer_profiles
from rooflab.reports.data.reads import nothing_stored


def load_crosschecks(url: Db) -> pd.DataFrame:
    """Every cross-check row (db.crosscheck.crosscheck_frame); an empty frame when there is no database yet."""
    if nothing_stored(url):
        return pd.DataFrame()
    return crosscheck_frame(url)


def load_counters(url: Db) -> pd.DataFrame:
    """Every counter reading (db.counters.counters_frame); an empty frame when there is no database yet."""
    if nothing_stored(url):
        return pd.DataFrame()
    return counters_frame(url)


LayerProfiles = tuple[pd.DataFrame, pd.DataFrame]  # (profiles, parts) as db.layer_query gives them


def load_layer_profiles(url: Db) -> LayerProfiles:
    """(profiles, parts) of the database at `url` (db.layer_query.layer_profiles); empty frames when
    nothing is stored yet."""
    if nothing_stored(url):
        return pd.DataFrame(), pd.DataFrame()
    return layer_profiles(url)


def load_collectives(url: Db, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """db.collectives.collective_frame of the database at `url`; empty when nothing is stored yet."""
    if nothing_stored(url):
        return pd.DataFrame()
    return collective_frame(url, run_ids=run_ids)
