"""What the recognisers of the format table (format_table.py) look at in a file's text, each worked out
once however many rows ask: the text, its JSON document (None when it is no JSON or does not decode),
its first JSON record (the document itself, a list's first object, or a JSON-lines file's first line),
its first CSV header and its head (a document cut short is still told by the keys it begins with)."""
from __future__ import annotations

import csv
import io
import json
from functools import cached_property

HEAD_CHARS = 20000


class Sniff:
    """One file's text, with the views the recognisers ask for."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def json_like(self) -> bool:
        """Whether the text begins as JSON does (an object or a list)."""
        return self.text.lstrip().startswith(("{", "["))

    @cached_property
    def _decoded(self) -> tuple[bool, object]:
        if not self.json_like:
            return False, None
        try:
            return True, json.loads(self.text)
        except json.JSONDecodeError:
            return False, None

    @property
    def decodes(self) -> bool:
        """Whether the whole text is one JSON document."""
        return self._decoded[0]

    @property
    def document(self) -> object:
        """The JSON document (None when the text is none)."""
        return self._decoded[1]

    @cached_property
    def first_record(self) -> dict[str, object] | None:
        """The document when it is an object, a list's first object, or a JSON-lines file's first line."""
        if not self.json_like:
            return None
        document = self.document
        if isinstance(document, list) and document:
            document = document[0]
        if self.decodes:
            return document if isinstance(document, dict) else None
        first = next((line for line in self.text.splitlines() if line.strip()), "")
        try:
            record = json.loads(first.strip().rstrip(","))
        except json.JSONDecodeError:
            return None
        return record if isinstance(record, dict) else None

    @cached_property
    def cut_json_head(self) -> str:
        """The head of a text that begins as one JSON document but does not decode (a document cut short),
        else ""."""
        return self.text[:HEAD_CHARS] if self.json_like and not self.decodes and self.first_record is None else ""

    @cached_property
    def csv_header(self) -> list[str]:
        """The first non-empty line's fields, as CSV, stripped."""
        first = next((line for line in self.text.splitlines() if line.strip()), "")
        return [f.strip() for f in next(csv.reader(io.StringIO(first)), [])]
