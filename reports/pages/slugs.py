"""File names of the report's pages and figures made from names in the database (no imports
beyond the standard library: the history's side process names its pages without loading the
plotting stack)."""
from __future__ import annotations

import hashlib
import re


def slug(text: str) -> str:
    """A short, safe file-name part for `text`: its letters and digits, and a hash that keeps two
    names apart when they read alike."""
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "x"
    return f"{base}-{hashlib.sha1(text.encode()).hexdigest()[:6]}"
