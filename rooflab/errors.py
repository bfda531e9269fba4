"""The one base of every error that means "the user gave something invalid".

Each package raises its own subclass (a spec, a filter, a database URL or file, a report option, a
plugin, a command-line value), so that a message says where it comes from; the command line catches
`UserError` alone, prints its message once (`runners/cli/epilogue.py:print_error`) and exits with code 2,
without a traceback. This module imports nothing, so every package may use it.
"""
from __future__ import annotations


class UserError(ValueError):
    """Invalid input from the user: the message names the place (file, field, flag), what is wrong
    and what is allowed."""
