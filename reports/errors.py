"""Errors the reports raise for invalid user input."""
from __future__ import annotations

from rooflab.errors import UserError


class ReportInputError(UserError):
    """Invalid input to a report (unknown device or run, bad shape string): exit code 2."""
