"""What the cluster's script tests share."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture()
def awkward_dir(tmp_path: Path) -> Path:
    """A directory whose name has spaces, quotes, a dollar, a percent and a hash."""
    path = tmp_path / "night run's \"dir\" $HOME %x #1"
    path.mkdir()
    return path
