"""Alembic environment: runs the migrations on the connection `db.schema` hands over.

`db.schema.alembic_config` puts an open connection (inside a transaction that already holds the
database's write lock) into `config.attributes["connection"]`; without one (the `alembic` tool
pointed at `sqlalchemy.url`), an engine is made from the URL.
"""
from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from rooflab.db.models import Base

config = context.config


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    from rooflab.db.engine import make_engine

    engine = make_engine(config.get_main_option("sqlalchemy.url") or "", write=True)
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()
