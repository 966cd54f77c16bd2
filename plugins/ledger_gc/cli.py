"""The ``ledgergc`` command: status, trim, orphans, restore and audit.

Settings come from ``LEDGERGC_*`` variables (see ``settings.py``). Every subcommand takes
``--json`` so it can be scripted; errors print one line that names the failing part and
exit with status 2, and nothing destructive runs after an error.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

from ledger_gc import __version__
from ledger_gc.config.edge import block_store, config_store_endpoint, zk_endpoint
from ledger_gc.config.secret_masking import install_secret_masking
from ledger_gc.config.secret_values import install_for
from ledger_gc.config.settings import Settings
from ledger_gc.console import EXIT_ERROR, EXIT_OK, human_bytes, print_json
from ledger_gc.errors import LedgerGcError
from ledger_gc.metadata.config_store import configuration_store
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.observability.metrics import render_metrics
from ledger_gc.observability.status import collect_status
from ledger_gc.observability.status_section import SECTION as STATUS_SECTION
from ledger_gc.observability.status_section import add_overview, describe_overview
from ledger_gc.state.stores import existing_store
from ledger_gc.storage.s3 import LedgerStorage

log = logging.getLogger("ledger_gc")

# A subcommand: registers its parser and returns the function that runs it.
Command = Callable[[argparse.Namespace, Settings], int]


# --- status ---------------------------------------------------------------------------


def add_status_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status", help="managed ledgers, ledgers, cursors, bytes and the trim backlog"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--ml", help="only this managed ledger (or a tenant/namespace prefix)")
    parser.add_argument(
        "--metadata-only", action="store_true", help="do not list the bucket (faster)"
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="print Prometheus text (orphans, trim backlog, reclaimed bytes, last runs)",
    )
    parser.set_defaults(func=run_status)


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    with ExitStack() as stack:
        store = stack.enter_context(MetadataStore.open(zk_endpoint(settings)))
        # Namespaces' policies, where a level's shape needs them: the configuration store's.
        config = config_store_endpoint(settings)
        policies = stack.enter_context(configuration_store(store, config))
        # The metrics use metadata and state files only: no bucket listing per scrape.
        no_blocks = args.metadata_only or args.metrics or not settings.block_store
        storage = None if no_blocks else LedgerStorage(block_store(settings))
        if storage is not None:
            storage.check_bucket()
        status = collect_status(store, storage, ml_filter=args.ml, policies=policies)
    # Only reads the state store: one that does not exist (a mistyped state dir) is
    # refused, not created; after ZooKeeper's and S3's own errors, so that a first
    # `ledgergc status` on a new install still says what is wrong with the servers.
    existing_store(settings)
    now = int(time.time() * 1000)
    data = status.to_dict(now)
    for extend in STATUS_EXTENSIONS:
        extend(data, settings)
    if args.metrics:
        sys.stdout.write(render_metrics(data[STATUS_SECTION]))
        return EXIT_OK
    if args.json:
        print_json(data)
        return EXIT_OK
    totals = data["totals"]
    zk = settings.given("LEDGERGC_ZK_HOSTS")
    print(f"store: zk={zk} bucket={settings.bucket} prefix={settings.prefix!r}")
    print(
        f"{totals['managed_ledgers']} managed ledgers, {totals['ledgers']} ledgers, "
        f"{totals['cursors']} cursors, {human_bytes(totals['metadata_bytes'])} in metadata, "
        f"{human_bytes(totals['storage_bytes'])} in storage"
    )
    print(
        f"trim backlog: {totals['pending_markers']} marked ledgers "
        f"({human_bytes(totals['pending_marker_bytes'])})"
    )
    for ml in status.managed_ledgers:
        if ml.error:
            print(f"  {ml.name}: unreadable: {ml.error}")
            continue
        cursors = ", ".join(f"{c.name}@{c.mark_delete}" for c in ml.cursors) or "no cursors"
        print(
            f"  {ml.name}: {len(ml.ledgers)} ledgers, {len(ml.markers)} marked, "
            f"{human_bytes(ml.storage_bytes)}; {cursors}"
        )
    if status.foreign_objects:
        print(f"foreign objects under the prefix: {status.foreign_objects} (never deleted)")
    for line in describe_overview(data[STATUS_SECTION]):
        print(line)
    return EXIT_OK


def add_settings(data: dict[str, Any], settings: Settings) -> None:
    """Each setting's value as given (secrets masked) and where it came from: the
    environment, a broker.conf key, an Airflow connection or variable, or its default."""
    data["settings"] = settings.provenance()


# Modules that add sections to `ledgergc status --json` (orphan registry, audit, metrics)
# register here: f(data, settings) edits the dict in place.
STATUS_EXTENSIONS: list[Callable[[dict[str, Any], Settings], None]] = [add_overview, add_settings]


# --- entry point ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledgergc",
        description="Keep a Pulsar-like store from leaking storage: the managed ledgers' "
        "blocks in S3 (metadata in ZooKeeper), Pulsar's tiered storage (offloaded "
        "segments) and a Pulsar cluster's BookKeeper ledgers.",
    )
    parser.add_argument("--version", action="version", version=f"ledger-gc {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        help="DEBUG, INFO, WARNING (progress goes to stderr; DEBUG also shows the "
        "ZooKeeper and S3 clients' own logs; secrets are *** in every log line)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also show the ZooKeeper and S3 clients' own logs (kazoo's connection "
        "attempts and retries, botocore's warnings)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_status_parser(subparsers)
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def _subcommands() -> list[Callable[[argparse._SubParsersAction], None]]:
    """The trim, orphan and restore subcommands (each module registers its own parser)."""
    from ledger_gc.commands import audit as audit_command
    from ledger_gc.commands import orphans as orphans_command
    from ledger_gc.commands import restore as restore_command
    from ledger_gc.commands import trim as trim_command

    return [
        trim_command.register,
        orphans_command.register,
        restore_command.register,
        audit_command.register,
    ]


SUBCOMMANDS = _subcommands()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    quiet_clients(level, verbose=args.verbose)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # a migration is not news
    # Every log record of every logger masked from here on: the derived forms at once,
    # the settings' secrets as soon as they are known.
    install_secret_masking()
    try:
        settings = Settings.from_env()
        install_for(settings)
        # A subcommand that only reads the state store (audit, restore, orphans --list)
        # says so: a mistyped state dir is no empty store, it is refused. Status refuses
        # it itself, after the servers' errors.
        reads_only = getattr(args, "reads_state_only", None)
        if reads_only is not None and reads_only(args):
            existing_store(settings)
        elif args.func is not run_status:
            settings.check_state_dir()  # a writing command creates the store
        return int(args.func(args, settings))
    except LedgerGcError as exc:
        if getattr(args, "json", False):
            print_json({"error": str(exc), "type": type(exc).__name__})
        print(f"ledgergc: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def quiet_clients(level: int, *, verbose: bool) -> None:
    """The ZooKeeper and object-store clients' logs: errors only, unless asked for.

    kazoo logs every connection attempt, and a WARNING per retry to an unreachable
    server ("Connection dropped: socket connection error"): lines that came before,
    and buried, the one-line error that says which server and what to check
    (``zk_client`` also logs a starting session's at DEBUG). ``--verbose`` shows what
    kazoo logs and botocore's warnings, ``--log-level DEBUG`` everything both log.
    """
    asked = verbose or level <= logging.DEBUG
    logging.getLogger("kazoo").setLevel(logging.DEBUG if asked else logging.ERROR)
    shown = level if level <= logging.DEBUG else logging.WARNING if verbose else logging.ERROR
    for name in ("botocore", "boto3", "urllib3", "azure", "google"):
        logging.getLogger(name).setLevel(shown)


if __name__ == "__main__":
    sys.exit(main())
