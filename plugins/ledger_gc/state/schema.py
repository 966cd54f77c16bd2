"""The state store's tables (SQLAlchemy Core), as the latest migration leaves them.

The migrations in ``migrations/versions`` are what builds a database; this module is what
the code reads and writes through, and ``tests/unit/test_state_store.py`` checks that the
two agree. Every name starts with ``ledgergc_`` so that the store can share a database
(e.g. a deployment's PostgreSQL) with other applications, Airflow's own tables included.

Times are ms since the epoch (``BigInteger``); sizes are bytes.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
)

metadata = MetaData()

# One row per registered orphan target, keyed by its key prefix; the columns are the
# fields of ``orphans.phases.RegistryEntry``.
orphans = Table(
    "ledgergc_orphans",
    metadata,
    Column("prefix", Text, primary_key=True),
    Column("target_class", Text, nullable=False),
    Column("ml_name", Text, nullable=False),
    Column("ledger_id", BigInteger),
    Column("first_seen_ms", BigInteger, nullable=False),
    Column("last_seen_ms", BigInteger, nullable=False),
    Column("first_scan", Integer, nullable=False),
    Column("last_scan", Integer, nullable=False),
    Column("scans_seen", Integer, nullable=False),
    Column("objects", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("newest_ms", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
)

# One row per scan applied, numbered 1, 2, ... with no gap (the registry gives the number
# itself, inside its serialised transaction: a sequence would skip the numbers of rolled
# back transactions, and a gap means "not seen by that scan" to the phase rules).
scans = Table(
    "ledgergc_scans",
    metadata,
    Column("number", Integer, primary_key=True, autoincrement=False),
    Column("run_id", Text, nullable=False, unique=True),
    Column("recorded_ms", BigInteger, nullable=False),
    Column("result", Text, nullable=False),  # JSON
)

# Append-only: one row per change of a registered target, with its reason.
history = Table(
    "ledgergc_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("time_ms", BigInteger, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("scan", Integer),
    Column("prefix", Text, nullable=False),
    Column("target_class", Text, nullable=False),
    Column("ml_name", Text, nullable=False),
    Column("ledger_id", BigInteger),
    Column("event", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("objects", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Index("ledgergc_history_run", "run_id"),
    Index("ledgergc_history_prefix", "prefix"),
)

# The audit log: one row per deleted (or restored) unit and status, in write order.
audit = Table(
    "ledgergc_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("time_ms", BigInteger, nullable=False),
    Column("operation", Text, nullable=False),
    Column("target_class", Text, nullable=False),
    Column("ml_name", Text, nullable=False),
    Column("ledger_id", BigInteger),
    Column("prefix", Text, nullable=False),
    Column("objects", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("recoverable", Boolean, nullable=False, server_default="0"),
    Column("versioning", Text),
    Column("noncurrent_expiration_days", Integer),
    Column("bucket", Text),  # where the delete went (None: an imported older record)
    Column("extra", Text),  # JSON: keys of imported records that have no column
    Index("ledgergc_audit_run", "run_id"),
    Index("ledgergc_audit_time", "time_ms"),
)

# Run summaries (trim runs, orphan cycles, with their guard refusals), in write order.
runs = Table(
    "ledgergc_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", Text, nullable=False),
    Column("run_id", Text),
    Column("recorded_ms", BigInteger, nullable=False),
    Column("summary", Text, nullable=False),  # JSON
    Index("ledgergc_runs_kind", "kind", "id"),
)

# What ``legacy_import`` has imported: one row per source file, written in the same
# transaction as the rows it imported, so an import happens once.
imports = Table(
    "ledgergc_imports",
    metadata,
    Column("source", Text, primary_key=True),
    Column("imported_ms", BigInteger, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("note", Text),
)

# What the steps of one orphan cycle hand each other (orphans/run_steps.py): one small
# JSON record per run and step, so that no task reads a file another task wrote.
run_steps = Table(
    "ledgergc_run_steps",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("step", Text, primary_key=True),
    Column("recorded_ms", BigInteger, nullable=False),
    Column("body", Text, nullable=False),  # JSON
)

# The diff's orphan candidates of a run: one row per target, in the diff's order.
run_candidates = Table(
    "ledgergc_run_candidates",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("prefix", Text, primary_key=True),
    Column("position", Integer, nullable=False),
    Column("target_class", Text, nullable=False),
    Column("ml_name", Text, nullable=False),
    Column("ledger_id", BigInteger),
    Column("objects", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("newest_ms", BigInteger, nullable=False),
    Column("oldest_ms", BigInteger, nullable=False),
    Column("max_ledger_id", BigInteger),
    Column("segment", Text),
)

# The BookKeeper record cache (bookkeeper/record_cache.py): CLOSED ledgers' records kept
# between cycles, one row per leaf directory of ledger znodes (10,000 ledger ids from
# ``first_ledger_id``), keyed by the BookKeeper's ``<root>/INSTANCEID`` and where it was
# read (``location``: ensemble, chroot, root, layout). A row is one listing of its
# directory: its stat then, every id listed, and the records read (packed, zlib;
# ``rules/bookkeeper/record_cache.py``), always written together.
bk_records = Table(
    "ledgergc_bk_records",
    metadata,
    Column("instance_id", Text, primary_key=True),
    Column("location", Text, primary_key=True),
    Column("first_ledger_id", BigInteger, primary_key=True, autoincrement=False),
    Column("directory", Text, nullable=False),
    Column("dir_czxid", BigInteger, nullable=False),
    Column("dir_cversion", BigInteger, nullable=False),
    Column("dir_pzxid", BigInteger, nullable=False),
    Column("cversion_proven", Boolean, nullable=False),
    Column("listed_ms", BigInteger, nullable=False),
    Column("ledgers", Integer, nullable=False),
    Column("records", Integer, nullable=False),
    Column("listed", LargeBinary, nullable=False),  # every ledger id listed
    Column("body", LargeBinary, nullable=False),  # the records
)

# One row per BookKeeper (as ``bk_records``): the cycles since its last full read, the
# highest ledger id its last cycle listed, its id counters as then (a reset drops the
# cache), and the format of its rows.
bk_record_cycles = Table(
    "ledgergc_bk_record_cycles",
    metadata,
    Column("instance_id", Text, primary_key=True),
    Column("location", Text, primary_key=True),
    Column("format", Integer, nullable=False),
    Column("cycles_since_full", Integer, nullable=False),
    Column("high_ledger_id", BigInteger),
    Column("id_counters", Text, nullable=False),  # JSON
    Column("updated_ms", BigInteger, nullable=False),
    Column("full_read_ms", BigInteger, nullable=False),
)

# BookKeeper ledgers that the Pulsar-metadata source handed to the BookKeeper source
# (state/handoff.py): one row per ledger id that a removed managed ledger, cursor or
# schema named, with the namespace, owner and znode that named it. The first hand-off of
# an id is kept; a row goes once BookKeeper no longer has its ledger.
bk_handoff = Table(
    "ledgergc_bk_handoff",
    metadata,
    Column("ledger_id", BigInteger, primary_key=True, autoincrement=False),
    Column("namespace", Text, nullable=False),
    Column("owner", Text, nullable=False),
    Column("named_by", Text, nullable=False),
    Column("at_ms", BigInteger, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("recorded_ms", BigInteger, nullable=False),
)

VERSION_TABLE = "ledgergc_alembic_version"
# The newest migration (``migrations/versions``), which these tables are. A store at this
# revision is used without loading Alembic's scripts: a Spark executor gets the library
# as a zip (``py_files``), where Alembic cannot read them (tests check the two agree).
HEAD_REVISION = "0004"
