"""Schema versions: create a new database at head, refuse older and newer ones, upgrade on request.

Alembic is configured in code (no alembic.ini, no reliance on the working directory): the
migrations are found next to this module, in the installed package as in the repository, and read
once per process (`script_directory`).

A new database is created from the models at head and stamped with the head revision (Alembic's
recipe for a database built from scratch), not by replaying every migration: on SQLite that replay
rebuilds tables in batch mode, 0.25 s of CPU per new database. The migrations stay the one way an
existing database changes (`rooflab db upgrade` replays them, on an empty database too, to any
revision asked for); tests/db/test_schema.py holds the two ways to the same schema (tables, columns,
types, indexes, keys and their options, server defaults, names).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.engine import URL

from rooflab.db.engine import make_engine, retry_locked
from rooflab.db.errors import DatabaseInputError, SchemaVersionError
from rooflab.db.models import Base
from rooflab.db.urls import normalize_url, redact, sqlite_path

if TYPE_CHECKING:  # Alembic is imported where a migration, a stamp or the revision list is needed
    from alembic.config import Config
    from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# every table of the models: any of them without an alembic_version marks a database "foreign"
OWN_TABLES = frozenset(Base.metadata.tables)
_PG_LOCK_KEY = 0x526F6F664C6162  # "RoofLab": serialises schema creation/upgrade between processes


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An Alembic config pointing at the packaged migrations, optionally bound to a connection."""
    from alembic.config import Config  # Alembic costs about 0.4 s of CPU: imported only where it is used

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


@functools.cache
def script_directory() -> ScriptDirectory:
    """The packaged migrations, read once per process (they are files of this installation)."""
    from alembic.script import ScriptDirectory  # Alembic only where it is used (see alembic_config)

    return ScriptDirectory.from_config(alembic_config())


def revisions() -> list[str]:
    """All revisions, oldest first."""
    return list(_revisions())


@functools.cache
def _revisions() -> tuple[str, ...]:
    return tuple(rev.revision for rev in reversed(list(script_directory().walk_revisions())))


def head_revision() -> str:
    return revisions()[-1]


# A migration's file is named after its revision, zero-padded so that the names sort in revision
# order (versions/0010_collective_mode_tool.py holds revision "0010"; tests/db/test_schema.py holds
# every file to it and the newest name to Alembic's head).
MIGRATION_FILE_SEPARATOR = "_"


@functools.cache
def newest_migration_file_revision() -> str | None:
    """The revision the newest migration file's name starts with, read without Alembic (whose import
    costs about 0.4 s of CPU, in every process that opens a database). A database stamped with it is
    at head: `inspect_connection` then needs no revision list; any other revision is judged by
    Alembic's own list. That holds while the names follow the rule above (the test's part)."""
    names = sorted(p.name for p in (MIGRATIONS_DIR / "versions").glob("*.py") if not p.name.startswith("__"))
    return names[-1].split(MIGRATION_FILE_SEPARATOR, 1)[0] if names else None


@dataclass(frozen=True)
class SchemaState:
    """What a database holds: `empty`, `current`, `older`, `newer` or `foreign` (tables, no version)."""

    kind: str
    revision: str | None


def inspect_connection(conn: Connection) -> SchemaState:
    tables = set(inspect(conn).get_table_names())
    if "alembic_version" not in tables:
        return SchemaState("foreign" if tables & OWN_TABLES else "empty", None)
    found = [row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))]
    if not found:
        return SchemaState("foreign" if tables & OWN_TABLES else "empty", None)
    if len(found) > 1:
        return SchemaState("newer", ",".join(sorted(found)))
    revision = found[0]
    if revision == newest_migration_file_revision():
        return SchemaState("current", revision)
    known = revisions()
    if revision == known[-1]:
        return SchemaState("current", revision)
    if revision in known:
        return SchemaState("older", revision)
    return SchemaState("newer", revision)


def read_state(url: str | URL) -> SchemaState:
    """The schema state of `url`, read without writing (a missing SQLite file is `empty`)."""
    parsed = url if isinstance(url, URL) else normalize_url(url)
    path = sqlite_path(parsed)
    if path is not None and (not path.exists() or path.stat().st_size == 0):
        return SchemaState("empty", None)
    engine = make_engine(parsed, write=False)
    try:
        with engine.connect() as conn:
            return inspect_connection(conn)
    except DatabaseInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - connection problems become one clear message
        raise DatabaseInputError(f"cannot open database {redact(parsed)}: {first_line(exc)}") from None
    finally:
        engine.dispose()


def refuse(state: SchemaState, url: str | URL) -> None:
    """Raise SchemaVersionError unless `state` can be used as it is (or created)."""
    if state.kind in ("current", "empty"):
        return
    shown = redact(url)
    head = head_revision()
    if state.kind == "older":
        raise SchemaVersionError(
            f"database {shown} has schema revision {state.revision}, older than this rooflab's {head}; "
            f"run `rooflab db upgrade --db {shown}` first"
        )
    if state.kind == "newer":
        raise SchemaVersionError(
            f"database {shown} has schema revision {state.revision}, which this rooflab (head {head}) does not "
            "know: it was written by a newer rooflab; upgrade rooflab instead. Nothing was written."
        )
    if state.kind == "foreign":
        raise SchemaVersionError(
            f"database {shown} has rooflab tables but no schema version (alembic_version); refusing to touch it"
        )


def require_current(url: str | URL) -> URL:
    """Check that `url` exists and is at head (for readers); returns the parsed URL."""
    parsed = url if isinstance(url, URL) else normalize_url(url)
    state = read_state(parsed)
    if state.kind == "empty":
        raise DatabaseInputError(f"no rooflab database at {redact(parsed)} (nothing has been stored there yet)")
    refuse(state, parsed)
    return parsed


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})


def check_sqlite_writable(path: Path, url: URL) -> None:
    """A SQLite file can be written (or created) only in an existing folder this process may write:
    SQLite adds its -wal and -shm files beside the database."""
    folder = path.parent
    if not folder.exists():
        raise DatabaseInputError(f"cannot create {redact(url)}: directory {folder} does not exist")
    if not folder.is_dir():
        raise DatabaseInputError(f"cannot create {redact(url)}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DatabaseInputError(f"cannot write {redact(url)}: directory {folder} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise DatabaseInputError(f"cannot write {redact(url)}: the file is read-only")


def create_schema(engine: Engine, url: URL) -> None:
    """Create the schema at head in a new database (another process may have done it meanwhile).
    Alembic and the migrations are read before the transaction: the write lock it takes is held
    only while the tables are created and stamped (other processes creating the same database
    wait for it)."""
    from alembic.runtime.migration import MigrationContext  # Alembic only where it is used (see alembic_config)

    migrations = script_directory()
    with engine.begin() as conn:
        _lock(conn)
        state = inspect_connection(conn)  # another process may have created it meanwhile
        if state.kind == "empty":
            # "empty" holds none of the models' tables (any one of them makes it "foreign"): no
            # table needs the look-up create_all would make before creating it
            Base.metadata.create_all(conn, checkfirst=False)
            MigrationContext.configure(conn).stamp(migrations, "head")
        else:
            refuse(state, url)


def upgrade(url: str | URL, revision: str = "head") -> tuple[str | None, str]:
    """Upgrade `url` to `revision` (head by default); returns (revision before, revision after)."""
    parsed = url if isinstance(url, URL) else normalize_url(url)
    state = read_state(parsed)
    if state.kind in ("newer", "foreign"):
        refuse(state, parsed)
    engine = make_engine(parsed, write=True)
    try:
        def _run() -> tuple[str | None, str]:
            from alembic import command  # Alembic only where it is used (see alembic_config)

            with engine.begin() as conn:
                _lock(conn)
                before = inspect_connection(conn)
                if before.kind in ("newer", "foreign"):
                    refuse(before, parsed)
                command.upgrade(alembic_config(conn), revision)
                after = inspect_connection(conn)
                return before.revision, after.revision or ""

        return retry_locked(_run)
    finally:
        engine.dispose()


def first_line(exc: BaseException) -> str:
    message = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return message[0] if message else type(exc).__name__
