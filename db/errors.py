"""Errors the database layer raises."""
from __future__ import annotations

from rooflab.errors import UserError


class DatabaseInputError(UserError):
    """Invalid input to the database layer (malformed import file, bad URL, bad option): exit code 2."""


class SchemaVersionError(DatabaseInputError):
    """The database's schema is older (run `rooflab db upgrade`) or newer (refused) than this rooflab."""
