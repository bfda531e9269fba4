"""The `rooflab` command line: the one place that wires suite, runners, db and reports together."""
from rooflab.runners.cli.app import app, main

__all__ = ["app", "main"]
