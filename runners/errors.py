"""The runners' exception for invalid user input, importable without the command-line app."""
from __future__ import annotations


class UserInputError(Exception):
    """Invalid input from the user: printed as one message, exit code 2, no traceback."""
