"""The state store: the one database that every ledger-gc process shares.

The orphan registry and its history, the audit log and the run summaries (with their guard
refusals) live in one database named by ``LEDGERGC_STATE_URL`` (a SQLAlchemy URL): by
default an embedded SQLite file in ``LEDGERGC_STATE_DIR``, in a deployment a PostgreSQL
database that every Airflow worker and the API server reach (DESIGN.md, "State").

* ``url``: the URL of a run's store, its check, and its password masked for messages;
* ``schema``: the tables (SQLAlchemy Core), the shape the migrations build;
* ``migrations``: Alembic's versioned migrations, run on first use (``migrate``);
* ``store``: ``StateStore``, the engine of one URL, its transactions (one per change,
  writers serialised) and the one-line errors of a store that is damaged or unreachable;
* ``legacy_import``: the one-time import of a state dir of JSON-lines and SQLite files.

The modules that own the data (``orphans.registry``, ``audit``, ``run_log``) keep their
APIs and reach the store through ``open_store``.
"""
