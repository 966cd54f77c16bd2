"""``ledgergc trim``: mark consumed ledgers deletable, delete every marked ledger's data.

    ledgergc trim [--ml NAME | --namespace TENANT/NS | --all] [--dry-run] [--json]

Prints the plan (what would be marked, what is marked already) and the result (ledgers
marked and deleted, bytes reclaimed (and, in a versioned bucket, bytes recoverable:
deleted from listings but still billed as noncurrent versions), markers still pending
with their age and last error). Exit status: 0 done, 1 some marker's data could not be
deleted (it stays marked and the next trim retries it), 2 an error (nothing unsafe was
done; the message says what failed). Progress goes to the log on stderr; ``--json``
prints the report on stdout.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ledger_gc.config.settings import Settings
from ledger_gc.termination import stop_on_signals


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trim",
        help="mark consumed ledgers deletable and delete every marked ledger's data",
        description=(
            "Mark-then-delete trim: ledgers every cursor has consumed and retention no "
            "longer keeps are marked deletable in the same write that drops them from the "
            "ledger list; then the data of every marked ledger is deleted and its marker "
            "removed. Exit 1 if a marker's data could not be deleted, 2 on errors."
        ),
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--ml", metavar="NAME", help="only this managed ledger")
    scope.add_argument(
        "--namespace", metavar="TENANT/NS", help="only the managed ledgers of this namespace"
    )
    scope.add_argument("--all", action="store_true", help="every managed ledger (the default)")
    parser.add_argument(
        "--dry-run", action="store_true", help="show the plan; write and delete nothing"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run_trim_command)


def run_trim_command(args: argparse.Namespace, settings: Settings) -> int:
    from ledger_gc.config.edge import resolve
    from ledger_gc.console import EXIT_ERROR, print_json
    from ledger_gc.trim.run import TrimScope, run_trim

    if args.ml:
        scope = TrimScope.of([args.ml])
    elif args.namespace:
        scope = TrimScope(namespace=args.namespace)
    else:
        scope = TrimScope.all()
    with stop_on_signals() as stop:
        report = run_trim(
            resolve(settings),  # the edge: resolved once, for the run
            scope=scope,
            dry_run=args.dry_run,
            source="cli",
            should_stop=stop,
        )
    data = report.to_dict()
    exit_code = report.exit_code
    if args.ml and data["managed_ledgers"] and data["managed_ledgers"][0]["missing"]:
        data["error"] = f"managed ledger {args.ml} not found; check the name (ledgergc status)"
        exit_code = EXIT_ERROR
    if args.json:
        print_json(data)
    else:
        print_text(data, settings)
    return exit_code


def print_text(data: dict[str, Any], settings: Settings) -> None:
    from ledger_gc.console import human_bytes

    totals = data["totals"]
    now = int(time.time() * 1000)
    mode = " (dry run: nothing written or deleted)" if data["dry_run"] else ""
    print(
        f"trim {data['run_id']}{mode}: {data['scope']}, {totals['managed_ledgers']} managed "
        f"ledgers; zk={settings.zk_hosts} bucket={settings.bucket} prefix={settings.prefix!r}"
    )
    print(
        f"plan: mark {totals['ledgers_planned']} ledgers "
        f"({human_bytes(totals['bytes_planned'])}); {totals['markers_found']} marked already"
    )
    for ml in data["managed_ledgers"]:
        plan = ml["plan"]
        if plan["to_mark"] or plan["already_marked"]:
            ids = ", ".join(str(x["ledger_id"]) for x in plan["to_mark"]) or "none"
            print(
                f"  {ml['name']}: mark {ids}; {len(plan['already_marked'])} marked already; "
                f"slowest reader {ml['slowest_reader'] or '(no cursors)'}"
            )
        if data["dry_run"]:
            for marker in plan["already_marked"]:
                print(
                    f"    marked {marker['age_seconds']:.0f}s ago: ledger {marker['ledger_id']} "
                    f"({human_bytes(marker['size'])}), {marker['attempts']} failed attempts"
                    + (f", last error: {marker['last_error']}" if marker["last_error"] else "")
                )
    if not data["dry_run"]:
        print(
            f"result: {totals['ledgers_marked']} marked, {totals['ledgers_deleted']} deleted "
            f"({human_bytes(totals['bytes_reclaimed'])} reclaimed, "
            f"{human_bytes(totals['bytes_recoverable'])} recoverable), "
            f"{totals['cursors_moved']} cursors moved, {totals['markers_pending']} markers "
            "pending"
        )
        if totals["bytes_recoverable"] and data.get("bucket"):
            # A versioned bucket: the data left the listings but not the bill.
            print(f"  recoverable, not reclaimed: {data['bucket']['note']}")
    for ml in data["managed_ledgers"]:
        for marker in ml["pending"]:
            age = (now - marker["marked_at"]) / 1000
            print(
                f"  pending {ml['name']} ledger {marker['ledger_id']}: marked {age:.0f}s ago, "
                f"{marker['attempts']} attempts, last error: {marker['last_error']}"
            )
        if ml["error"]:
            print(f"  error {ml['name']}: {ml['error']}")
    if data["error"]:
        print(f"error: {data['error']}")
    print(f"outcome: {data['outcome']}")
