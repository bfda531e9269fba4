"""Database URLs: normalising what users type, and printing them without their password."""
from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from rooflab.db.errors import DatabaseInputError

_PASSWORD_IN_URL = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):(?P<password>[^@\s]*)@")


def redact(url: str | URL | None) -> str:
    """`url` with any password replaced by `***` (also for strings SQLAlchemy cannot parse)."""
    if url is None:
        return ""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - anything unparsable is redacted textually
        return _PASSWORD_IN_URL.sub(r"\g<head>:***@", url)
    if parsed.password is None:
        return _PASSWORD_IN_URL.sub(r"\g<head>:***@", url)
    return parsed.render_as_string(hide_password=True)


def normalize_url(url: str) -> URL:
    """Parse a user's `--db` value into a SQLAlchemy URL.

    A plain path (no `://`) is a SQLite file; `postgresql://` and `postgres://` use psycopg 3.
    In-memory SQLite is refused: results must outlive the process and be shared between processes.
    """
    text = str(url).strip()
    if not text:
        raise DatabaseInputError("empty database URL; give e.g. sqlite:///results.db or postgresql://host/db")
    if "://" not in text:
        text = "sqlite:///" + str(Path(text))
    if text.startswith("postgres://"):
        text = "postgresql://" + text[len("postgres://"):]
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError) as exc:
        raise DatabaseInputError(f"invalid database URL {redact(text)!r}: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:" or parsed.database.startswith("file::memory:"):
            raise DatabaseInputError(
                f"in-memory SQLite ({redact(text)!r}) cannot hold results; give a file, e.g. sqlite:///results.db"
            )
    else:
        raise DatabaseInputError(
            f"unsupported database {redact(text)!r}: use sqlite:///FILE or postgresql://USER@HOST/DB"
        )
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for another database."""
    if url.get_backend_name() != "sqlite":
        return None
    return Path(url.database or "")
