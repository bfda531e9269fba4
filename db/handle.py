"""One database handle per command: the URL parsed once, one engine, the schema version checked once.

A command that reads and writes one database (`rooflab run`, `rooflab nightly`) opens a `Database`
and passes it down: the store (db.store.ResultStore), the readers (db.query) and the shard planner
(runners.orchestration.shards) all use its engine instead of parsing the URL and opening an engine of their own.
Reads go through the same engine with the READ_ONLY execution option (a plain BEGIN on SQLite, so
they do not wait for the write lock). Nothing is connected until it is needed, and a database that
is not there is created only by `writer()`.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from rooflab.db.engine import READ_ONLY, make_engine, retry_locked
from rooflab.db.errors import DatabaseInputError
from rooflab.db.schema import (
    SchemaState,
    check_sqlite_writable,
    create_schema,
    first_line,
    inspect_connection,
    read_state,
    refuse,
    require_current,
)
from rooflab.db.urls import normalize_url, redact, sqlite_path


class Database:
    """A results database for the length of one command; `close()` (or `with`) disposes its engine."""

    def __init__(self, url: str | URL) -> None:
        self.url: URL = url if isinstance(url, URL) else normalize_url(url)
        self._engine: Engine | None = None
        self._current = False  # the schema was found (or made) current: no need to look again

    def __repr__(self) -> str:
        return f"Database({self.shown!r})"

    def __enter__(self) -> Database:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def shown(self) -> str:
        """The URL with its password redacted."""
        return redact(self.url)

    def exists(self) -> bool:
        """False only for a SQLite file that is not there (a server database is assumed to exist)."""
        path = sqlite_path(self.url)
        return path is None or path.exists()

    def _engine_once(self) -> Engine:
        if self._engine is None:
            self._engine = make_engine(self.url, write=True)
        return self._engine

    def state(self) -> SchemaState:
        """The schema state (db.schema.SchemaState), read without writing; a missing file is empty."""
        if self._current:
            return SchemaState("current", None)
        path = sqlite_path(self.url)
        if path is not None and (not path.exists() or path.stat().st_size == 0):
            return SchemaState("empty", None)
        try:
            with self._engine_once().execution_options(**READ_ONLY).connect() as conn:
                state = inspect_connection(conn)
        except DatabaseInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection problems become one clear message
            raise DatabaseInputError(f"cannot open database {self.shown}: {first_line(exc)}") from None
        self._current = state.kind == "current"
        return state

    def reader(self) -> Engine:
        """The engine for reads, once the schema is known to be current (else DatabaseInputError or
        SchemaVersionError, as db.schema.require_current)."""
        state = self.state()
        if state.kind == "empty":
            raise DatabaseInputError(f"no rooflab database at {self.shown} (nothing has been stored there yet)")
        refuse(state, self.url)
        return self._engine_once().execution_options(**READ_ONLY)

    def writer(self) -> Engine:
        """The engine for writes, creating the schema at head if the database is new (as
        open_for_writing); an older, newer or unversioned database is refused unwritten."""
        if self._current:
            return self._engine_once()
        state = self.state()
        refuse(state, self.url)
        path = sqlite_path(self.url)
        if path is not None:
            check_sqlite_writable(path, self.url)
        engine = self._engine_once()
        if state.kind == "empty":
            try:
                retry_locked(lambda: create_schema(engine, self.url))
            except OperationalError as exc:
                raise DatabaseInputError(f"cannot write {self.shown}: {first_line(exc)}") from None
        self._current = True
        return engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        self._current = False


def open_for_writing(url: str | URL) -> Engine:
    """A write engine for `url`, creating the schema at head if the database is new.

    An older, newer or unversioned database raises SchemaVersionError before anything is written.
    The engine is that of a Database of its own: disposing it is the caller's.
    """
    database = Database(url)
    try:
        return database.writer()
    except BaseException:
        database.close()
        raise


def as_database(db: str | URL | Database) -> tuple[Database, bool]:
    """(handle, whether the caller owns it and must close it): a URL gets a handle of its own."""
    if isinstance(db, Database):
        return db, False
    return Database(db), True


Db = str | URL | Database  # what the readers take: a URL, or the command's open handle


def schema_state(db: Db) -> SchemaState:
    """The schema state of `db` (db.schema.read_state for a URL; the handle's own check otherwise)."""
    return db.state() if isinstance(db, Database) else read_state(db)


@contextmanager
def reading(db: Db) -> Iterator[Engine]:
    """An engine to read `db` with, its schema checked current: the handle's own engine, or a
    read-only one opened for this use and disposed after it."""
    if isinstance(db, Database):
        yield db.reader()
        return
    engine = make_engine(require_current(db), write=False)
    try:
        yield engine
    finally:
        engine.dispose()


def shown(db: Db) -> str:
    """The URL of `db` to print: its password redacted."""
    return db.shown if isinstance(db, Database) else redact(db)
