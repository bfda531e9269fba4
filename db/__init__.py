"""rooflab's results database (SQLite by default, PostgreSQL for a cluster).

Writing: `db.store.ResultStore`. Reading: `db.query` (pandas DataFrames). Files: `db.export`,
`db.importer`. Maintenance: `db.schema` (Alembic revisions in `db/migrations`), `db.merge`,
`db.prune`. `db` knows nothing of torch: runners hand it the plain records of `rooflab.record`.
"""
