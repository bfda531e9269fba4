"""Errors the suite raises for invalid user input (specs, filters)."""
from __future__ import annotations

from rooflab.errors import UserError


class SpecError(UserError):
    """A spec or filter is invalid. The message names the file, the field path (and line where
    known), what is wrong and what is allowed; the CLI prints it and exits with code 2."""
