"""The one error a parser raises: the file is not what its format says (where, and what is wrong)."""
from __future__ import annotations

from rooflab.errors import UserError


class PeerFormatError(UserError):
    """A peer's output that cannot be read as its format: `line` (1-based; None for the whole file)
    and what is wrong. The caller adds the file's name (`located`)."""

    def __init__(self, what: str, line: int | None = None) -> None:
        self.what = what
        self.line = line
        super().__init__(f"line {line}: {what}" if line is not None else what)

    def located(self, path: object) -> str:
        """The message with the file in front: `FILE: line N: what`."""
        return f"{path}: {self}"
