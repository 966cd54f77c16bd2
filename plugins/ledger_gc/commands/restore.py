"""``ledgergc restore``: bring back what a run deleted, from its audit records.

    ledgergc restore --run RUN_ID [--dry-run] [--json]

An orphan cycle's BookKeeper ledgers get their metadata znodes back (``bookkeeper/
restore.py``: the record's bytes, written ahead of each delete), until the bookies' next
garbage collection; its Pulsar-metadata znodes too (``pulsar_metadata/restore.py``:
parents first, with the ACLs they had); a trim's or an orphan cycle's blocks and offloaded
segments come back in a bucket that keeps deleted objects: on S3 the run's delete markers
are removed (``restore/restoring.py``), on GCS and Azure the version the run's audit names
(the generation or ETag its delete was conditioned on) is made current again. Audited
ahead. Prints per target what was (or, with ``--dry-run``, would be) restored. Exit
status: 0 done, 1 some target could not be restored (the rest was; an offloaded object
whose audited version the bucket no longer keeps is one), 2 refused or an error (one
line: an unversioned bucket, a run id the audit log does not know). Restored trimmed
ledgers are data only: their metadata entry is not re-created (they show up as orphan
ledgers).
"""

from __future__ import annotations

import argparse
from typing import Any

from ledger_gc.config.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "restore",
        help="undo a run's deletes: BookKeeper ledgers (until the bookies' next garbage "
        "collection), Pulsar-metadata znodes and, in a versioned bucket, a trim's or an "
        "orphan cycle's blocks and offloaded segments",
        description=(
            "Undo what run RUN_ID deleted, from its audit records. BookKeeper ledgers (an "
            "orphan cycle's bk-* deletes): each metadata znode is created again with the "
            "record's bytes audited ahead of its delete (never over an existing znode), "
            "which works only until the bookies' next garbage collection (gcWaitTime, 10 "
            "minutes by default) drops the data. Pulsar-metadata znodes (pm-* deletes): "
            "re-created parents first with their bytes and ACLs, never over an existing "
            "znode. Ledger blocks and offloaded segments (a "
            "trim's or an orphan cycle's deletes): in a versioned bucket a delete only "
            "adds delete markers, and removing the ones the run left brings the data back; "
            "an unversioned bucket's deletes cannot be undone. Data only: a restored "
            "trimmed ledger is not re-listed in its managed ledger, so it is an orphan "
            "ledger until an operator re-lists it."
        ),
    )
    parser.add_argument(
        "--run",
        required=True,
        metavar="RUN_ID",
        help="the run whose deletes to undo (its audit log run_id)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would be restored; change nothing"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    # Its audit log must exist: a restore of a mistyped state dir has nothing to read.
    parser.set_defaults(func=run_restore_command, reads_state_only=lambda _args: True)


def run_restore_command(args: argparse.Namespace, settings: Settings) -> int:
    from ledger_gc.config.edge import resolve
    from ledger_gc.console import print_json
    from ledger_gc.restore.restoring import restore_run

    report = restore_run(resolve(settings), args.run, dry_run=args.dry_run)  # the edge
    data = report.to_dict()
    if args.json:
        print_json(data)
    else:
        print_text(data)
    return report.exit_code


#: Restores whose targets are znodes, not a bucket's objects: where they are.
IN_ZOOKEEPER = {"pulsar-metadata": "Pulsar's metadata in ZooKeeper", "bookkeeper": "ZooKeeper"}


def _znode_line(item: dict[str, Any], dry_run: bool) -> str:
    """One Pulsar-metadata znode: its store and path, whose leftover, what was done."""
    from ledger_gc.console import human_bytes

    if item["error"]:
        done = f"not restored: {item['error']}"
    elif item["already"]:
        done = "already there with the audited bytes (restored before)"
    elif dry_run:
        done = "would restore"
    else:
        done = f"restored ({human_bytes(item['bytes_restored'])})"
    return f"{item['store']}:{item['znode']} of {item['prefix']}: {done}"


def print_text(data: dict[str, Any]) -> None:
    from ledger_gc.console import human_bytes

    mode = " (dry run: nothing changed)" if data["dry_run"] else ""
    where = data["bucket"]
    if where["versioning"] in IN_ZOOKEEPER:
        place = f"{IN_ZOOKEEPER[where['versioning']]} at {where['bucket']}"
    else:
        place = f"bucket {where['bucket']!r}, versioning {where['versioning']}"
    print(f"restore {data['run_id']} of run {data['restores_run']}{mode}: {place}")
    for item in data["prefixes"]:
        if item.get("znode"):
            print(f"  {_znode_line(item, data['dry_run'])}")
            continue
        if data["dry_run"]:
            what = f"would restore {item['markers']} objects"
        else:
            what = (
                f"restored {item['objects_restored']} of {item['markers']} objects "
                f"({human_bytes(item['bytes_restored'])})"
            )
        skipped = (
            f", {item['skipped']} left alone (not this run's latest delete marker)"
            if item["skipped"]
            else ""
        )
        by_time = (
            ", chosen by time (the newest kept in the run's window: its audit names no version)"
            if item.get("chosen_by") == "time"
            else ""
        )
        error = f"; error: {item['error']}" if item["error"] else ""
        print(f"  {item['prefix']}: {what}{by_time}{skipped}{error}")
        for line in item.get("unrestorable") or []:
            print(f"    {line}")
    unit = "znodes" if where["versioning"] in IN_ZOOKEEPER else "objects"
    already = f", {data['already_restored']} already there" if data["already_restored"] else ""
    unrestorable = f", {data['unrestorable']} not kept any more" if data.get("unrestorable") else ""
    print(
        f"result: {data['objects_restored']} {unit} "
        f"({human_bytes(data['bytes_restored'])}) restored{already}, {data['errors']} errors"
        f"{unrestorable}"
    )
    print(f"note: {data['note']}")
