"""The one error a parser raises: the file is not what its format says (where, and what is wrong);
and the JSON reading that raises it."""
from __future__ import annotations

import json
from typing import Any

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


def json_document(text: str) -> Any:
    """`text` read as JSON; PeerFormatError with the line and column where it is cut short or damaged."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PeerFormatError(f"invalid JSON ({exc.msg}, column {exc.colno}): cut short or damaged",
                              exc.lineno) from None
