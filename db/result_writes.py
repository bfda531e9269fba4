"""The journal of writes to results on PostgreSQL: every statement that inserts, changes or deletes
rows of `measurements` adds one row per run it touched to `result_writes` (statement-level triggers
with transition tables: a COPY of 500 results adds one row, not 500).

The per-series state (db.series_state) records, for each run it has folded in, how many journal
rows the run had then; a run whose count has changed since (a late shard, a merge into an old run, a
deletion) makes the state be built again. Rows are only ever inserted by the triggers (concurrent
writers never wait on each other) and compacted by the state's fold, which holds its lock.

SQLite keeps no state (its series facts are read from the results each time), so it has no journal
triggers; the table exists on both, as the models create it. The statements are here once, for the
models' `create_all` and for revision 0013.
"""
from __future__ import annotations

from sqlalchemy import Connection

FUNCTION = """
CREATE OR REPLACE FUNCTION rooflab_result_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO result_writes (run_id, writes) SELECT DISTINCT run_id, 1 FROM new_rows;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO result_writes (run_id, writes) SELECT run_id, 1 FROM new_rows UNION SELECT run_id, 1 FROM old_rows;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO result_writes (run_id, writes) SELECT DISTINCT run_id, 1 FROM old_rows;
    ELSE
        DELETE FROM series_state_runs;
        DELETE FROM series_state;
    END IF;
    RETURN NULL;
END
$$
"""

TRIGGERS = (
    "CREATE TRIGGER measurements_written AFTER INSERT ON measurements REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION rooflab_result_writes()",
    "CREATE TRIGGER measurements_changed AFTER UPDATE ON measurements REFERENCING OLD TABLE AS old_rows "
    "NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rooflab_result_writes()",
    "CREATE TRIGGER measurements_deleted AFTER DELETE ON measurements REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION rooflab_result_writes()",
    "CREATE TRIGGER measurements_truncated AFTER TRUNCATE ON measurements "
    "FOR EACH STATEMENT EXECUTE FUNCTION rooflab_result_writes()",
)
TRIGGER_NAMES = ("measurements_written", "measurements_changed", "measurements_deleted", "measurements_truncated")


def install(conn: Connection) -> None:
    """The journal's function and triggers, on a PostgreSQL database whose tables exist (nothing elsewhere)."""
    if conn.dialect.name != "postgresql":
        return
    conn.exec_driver_sql(FUNCTION)
    for statement in TRIGGERS:
        conn.exec_driver_sql(statement)


def remove(conn: Connection) -> None:
    """What `install` made, gone again (revision 0013's downgrade)."""
    if conn.dialect.name != "postgresql":
        return
    for name in TRIGGER_NAMES:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name} ON measurements")
    conn.exec_driver_sql("DROP FUNCTION IF EXISTS rooflab_result_writes()")
