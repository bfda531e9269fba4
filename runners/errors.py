"""The runners' exception for invalid user input, importable without the command-line app."""
from __future__ import annotations

from rooflab.errors import UserError


class UserInputError(UserError):
    """Invalid input to a runner (a device, a run id, a timing value, a command-line choice)."""
