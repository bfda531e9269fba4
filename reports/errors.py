"""Errors the reports raise for invalid user input."""
from __future__ import annotations


class ReportInputError(ValueError):
    """Invalid input to a report (unknown device or run, bad shape string): exit code 2."""
