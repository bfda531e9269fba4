"""What the CLI commands that read results share: pandas and SQLAlchemy's queries load with this
module, not with every command (runners/cli/common.py is every command's)."""
from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd

from rooflab.db.query import environments
from rooflab.reports.data.reads import load_results
from rooflab.runners.cli.common import db_url
from rooflab.runners.cli.epilogue import guarded


def tools_of_devices(url: str) -> dict[str, str]:
    """device fingerprint -> the peer tool whose imported results it holds (runners/peer_import: an
    imported device's identity names its tool); rooflab's own devices are not listed."""
    frame = environments(url)
    out: dict[str, str] = {}
    for fingerprint, identity in zip(frame["device_fingerprint"], frame["identity"], strict=True):
        tool = json.loads(identity).get("tool") if isinstance(identity, str) and identity else None
        if tool:
            out[str(fingerprint)] = str(tool)
    return out


def load_results_or_fail(db: str | None, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Every result of the database (reports.data.reads.load_results), or one message and exit code 2."""
    return guarded(lambda: load_results(db_url(db), columns=columns))
