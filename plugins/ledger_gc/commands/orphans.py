"""The ``ledgergc orphans`` subcommand: one full orphan cycle, reported.

Runs ``run_orphan_cycle`` with a Spark session on ``local[*]``, or on the master that
``PYSPARK_SUBMIT_ARGS`` names (``--master spark://host:7077 ... pyspark-shell``). On a
master that is not local the executors are other processes (other hosts), which get the
object stores' credentials in their tasks: like an Airflow task's application, they get
short-lived ones only (``config.spark_credentials``: an STS session for long-lived AWS
keys, a SAS of the offload container for an Azure account key), minted before Spark
starts; a refused exchange is exit 2 and one line. Exit status: 0 when the cycle
completed, 1 when a guard refused it, a delete failed or another cycle held the delete
lock (work left for the next run), 2 on an error (nothing deleted after it).
"""

from __future__ import annotations

import argparse
import os
from functools import partial
from typing import TYPE_CHECKING, cast

from ledger_gc.clock import now_ms
from ledger_gc.config import spark_credentials
from ledger_gc.config.edge import resolve
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import DeleteLockLost, OrphanCycleError, run_orphan_cycle
from ledger_gc.orphans.options import FORCE_HELP
from ledger_gc.orphans.records import CycleStatus
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.report import CycleReport, render_text
from ledger_gc.spark.session import LazySession, local_session, session_master
from ledger_gc.state.store import RESET_CONSEQUENCE
from ledger_gc.state.stores import open_store
from ledger_gc.storage.offload_buckets import account_soft_delete_days
from ledger_gc.termination import stop_on_signals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_ERROR = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "orphans",
        help="find storage no metadata references; register, correct and delete it "
        "(three phases, KIP-370)",
        description="One orphan cycle over every source: snapshot the metadata, scan the "
        "bucket's blocks (or read an S3 Inventory), the offload bucket's segments "
        "(LEDGERGC_OFFLOAD_BUCKET), BookKeeper's ledgers (LEDGERGC_BOOKKEEPER) and Pulsar's "
        "own metadata (LEDGERGC_PULSAR_METADATA: what deleted tenants, namespaces and dead "
        "brokers leave in ZooKeeper), register "
        "orphans, correct those referenced again, and delete those past grace and "
        "retention that a live re-check confirms. Deletes only with "
        "LEDGERGC_DELETE_ENABLED=true.",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="re-check and report, delete nothing"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help=FORCE_HELP,
    )
    parser.add_argument(
        "--inventory",
        metavar="PATH",
        help="an S3 Inventory report (Parquet or CSV file or folder) instead of listing",
    )
    parser.add_argument(
        "--offload-inventory",
        metavar="PATH",
        help="an S3 Inventory report of LEDGERGC_OFFLOAD_BUCKET instead of listing it",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--list",
        action="store_true",
        help="list every registered orphan: when it can be deleted and what it still "
        "waits for (grace, retention, deletion disabled, a guard). Reads only the state "
        "store; runs no cycle",
    )
    parser.add_argument(
        "--reset-registry",
        action="store_true",
        help="start a fresh orphan registry: a damaged SQLite state file (or an old "
        "registry file not imported) is moved aside, else the registry's rows are removed; "
        "every grace window starts again. Runs no cycle",
    )
    # A cycle creates the state store on first use; --list only reads it.
    parser.set_defaults(func=run_orphans, reads_state_only=lambda args: args.list)


def _print(report: CycleReport, as_json: bool) -> None:
    if as_json:
        from ledger_gc.console import print_json

        print_json(report.to_dict())
    else:
        for line in render_text(report):
            print(line)


def reset_registry(settings: Settings, as_json: bool) -> int:
    """``--reset-registry``: the documented way out of a damaged registry (issue 11).

    Only ever delays deletion: a fresh registry knows no orphan, so each one is
    registered again and waits a full grace window before it can go.
    """
    registry = OrphanRegistry(settings)
    done = registry.reset(now_ms())
    # A damaged store moved aside leaves none: the fresh one RESET_HINT promises is made
    # now, so that the reading commands (`ledgergc audit`...) find a store, empty.
    open_store(settings).ready()
    if as_json:
        from ledger_gc.console import print_json

        print_json({"registry": registry.path, "done": done})
    elif done is None:
        print(f"the orphan registry in {registry.path} is empty; nothing to reset")
    else:
        print(
            f"reset the orphan registry: {done}; the next cycle starts afresh: {RESET_CONSEQUENCE}"
        )
    return EXIT_OK


def list_registered(settings: Settings, as_json: bool) -> int:
    """``--list``: the registry as the page's table shows it (``observability.registered``)."""
    from ledger_gc.observability.registered import registered_orphans

    listing = registered_orphans(settings)
    if as_json:
        from ledger_gc.console import print_json

        print_json(listing)
        return EXIT_OK
    for line in render_listing(listing):
        print(line)
    return EXIT_OK


def render_listing(listing: dict) -> list[str]:
    """The ``--list`` table as text: one line per registered orphan, soonest first."""
    from ledger_gc.console import human_bytes
    from ledger_gc.rules.orphans.phases import iso

    orphans = listing["orphans"]
    lines = [
        f"{len(orphans)} registered orphan(s) in {listing['state_url']} "
        f"(grace {listing['grace_seconds']} s, retention {listing['retention_seconds']} s, "
        f"deletion {'on' if listing['delete_enabled'] else 'off'})"
    ]
    for item in orphans:
        at = item["deletable_at_ms"]
        when = "after its next scan" if at is None else f"from {iso(at)}"
        lines.append(
            f"  {item['class']:<16} {item['prefix']}  {item['objects']} objects "
            f"{human_bytes(item['bytes'])}  seen {item['scans_seen']}x since "
            f"{iso(item['first_seen_ms'])}  deletable {when}; waits for "
            f"{', '.join(item['waiting_for'])}"
        )
    return lines


def cycle_endpoints(settings: Settings) -> tuple[Endpoints, str]:
    """The endpoints of a cycle (the edge: resolved once, for the whole cycle) and the
    Spark master it runs on (``session_master``). On a master that is not local the
    settings' long-lived secrets are exchanged first (``spark_credentials.for_spark``),
    as an Airflow task's are: the executors get what these endpoints carry. The STS is
    boto3's ``AWS_ENDPOINT_URL_STS`` when set (an S3-compatible store's own STS), else
    AWS's; a store that is not AWS and names none hands its static keys on, as the
    Airflow path does."""
    master = session_master()
    settings = spark_credentials.for_spark(
        settings,
        local_master=spark_credentials.is_local_master(master),
        soft_delete_days=account_soft_delete_days,
        sts_endpoint=os.environ.get("AWS_ENDPOINT_URL_STS") or None,
    )
    return resolve(settings), master


def run_orphans(args: argparse.Namespace, settings: Settings) -> int:
    if args.reset_registry:
        return reset_registry(settings, args.json)
    if args.list:
        return list_registered(settings, args.json)
    endpoints, master = cycle_endpoints(settings)
    # Made when a step needs it, on the master the credentials were decided for.
    spark = cast("SparkSession", LazySession(partial(local_session, master=master)))
    try:
        # SIGTERM: the delete batch under way finishes and is audited, the rest waits.
        with stop_on_signals():
            report = run_orphan_cycle(
                endpoints,
                spark=spark,
                dry_run=True if args.dry_run else None,
                force=args.force,
                inventory=args.inventory,
                offload_inventory=args.offload_inventory,
            )
    except OrphanCycleError as exc:
        _print(exc.report, args.json)
        # A lost delete lock stopped the cycle cleanly: work is left, nothing is wrong.
        return EXIT_INCOMPLETE if isinstance(exc.__cause__, DeleteLockLost) else EXIT_ERROR
    _print(report, args.json)
    data = report.to_dict()
    if report.status != CycleStatus.OK or data["failed"] or data.get("pending"):
        return EXIT_INCOMPLETE
    return EXIT_OK
