"""The ``ledgergc audit`` subcommand: the audit log, as a table or JSON.

``ledgergc audit [--run ID] [--class C] [--since T] [--status S] [--limit N] [--json]``
reads the state store only (no ZooKeeper, no S3), so it answers "what did the GC delete,
when and why" even while the store it cleans is down. Records come oldest first, both
the write-ahead ``deleting`` records and the ``deleted`` ones (``--status deleted``: only
what was freed). ``--since`` takes an ISO time (``2026-01-31``, ``2026-01-31T12:00Z``),
epoch milliseconds, or an age (``90m``, ``24h``, ``7d``).
"""

from __future__ import annotations

import argparse
import re
import time
from datetime import UTC, datetime
from typing import Any

from ledger_gc.audit import AuditLog
from ledger_gc.config.settings import Settings
from ledger_gc.console import EXIT_OK, human_bytes, print_json
from ledger_gc.deletion import OFFLOADED_LEDGER
from ledger_gc.errors import ConfigError
from ledger_gc.marking import LEDGER
from ledger_gc.observability.timefmt import fmt_time
from ledger_gc.rules.orphans.classify import TARGET_CLASSES

_AGE = re.compile(r"(\d+)\s*([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_LIMIT = 1000
#: Every class a deletion is audited under: the trim's (and a managed-ledger delete's)
#: ledgers and their offloaded copies, and every orphan class of every source.
AUDIT_CLASSES = (LEDGER, OFFLOADED_LEDGER, *TARGET_CLASSES)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="the audit log of every deletion (and restore): a table, or --json",
        description="Read the audit log in the state store (LEDGERGC_STATE_URL). Each "
        "deletion has a write-ahead 'deleting' record and, once done, a 'deleted' one, or "
        "a 'not-deleted' one when the store refused it (a 'deleting' record alone: the "
        "delete was sent and its answer lost).",
    )
    parser.add_argument("--run", metavar="ID", help="only this run's records")
    parser.add_argument(
        "--class",
        dest="target_class",
        metavar="C",
        help=f"only this target class: {', '.join(AUDIT_CLASSES)}",
    )
    parser.add_argument(
        "--since", metavar="T", help="from this time on: ISO time, epoch ms, or an age (24h, 7d)"
    )
    parser.add_argument(
        "--status",
        choices=("deleting", "deleted", "not-deleted", "restoring", "restored", "not-restored"),
        help="only these",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"at most this many, the newest (default {DEFAULT_LIMIT}; 0: all)",
    )
    parser.add_argument("--json", action="store_true", help="print the records as JSON")
    parser.set_defaults(func=run_audit, reads_state_only=lambda _args: True)


def parse_since(text: str, now_ms: int) -> int:
    """``--since``'s time in epoch ms, or ``ConfigError`` naming the option and forms."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    age = _AGE.fullmatch(value)
    if age:
        return now_ms - int(age.group(1)) * _UNIT_SECONDS[age.group(2)] * 1000
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"--since {text!r} is not a time; give an ISO time (2026-01-31 or "
            "2026-01-31T12:00:00Z), epoch milliseconds, or an age (90m, 24h, 7d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def run_audit(args: argparse.Namespace, settings: Settings) -> int:
    since = parse_since(args.since, int(time.time() * 1000)) if args.since else None
    if args.limit < 0:
        raise ConfigError(f"--limit {args.limit} must be 0 (all) or more")
    if args.target_class is not None and args.target_class not in AUDIT_CLASSES:
        # A typo would filter everything out and read as "nothing was deleted".
        raise ConfigError(
            f"--class {args.target_class!r} is no class ledger-gc audits; the classes are "
            f"{', '.join(AUDIT_CLASSES)}"
        )
    records = AuditLog(settings).read(
        args.limit or None,
        run_id=args.run,
        target_class=args.target_class,
        since_ms=since,
        status=args.status,
    )
    if args.json:
        print_json(records)
        return EXIT_OK
    for line in render_table(records):
        print(line)
    return EXIT_OK


_COLUMNS = ("time (UTC)", "status", "operation", "class", "what", "objects", "size", "run")


def render_table(records: list[dict[str, Any]]) -> list[str]:
    """The records as an aligned text table, then one line of totals."""
    if not records:
        return ["no audit records match"]
    rows = [
        (
            fmt_time(r.get("time_ms")).removesuffix(" UTC"),
            str(r.get("status") or "deleted") + (" (recoverable)" if r.get("recoverable") else ""),
            str(r.get("operation") or ""),
            str(r.get("target_class") or ""),
            _what(r),
            str(r.get("objects") or 0),
            human_bytes(int(r.get("bytes") or 0)),
            str(r.get("run_id") or ""),
        )
        for r in records
    ]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(_COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(_COLUMNS, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    freed = [r for r in records if (r.get("status") or "deleted") == "deleted"]
    lines.append(
        f"{len(records)} records; {len(freed)} deleted, "
        f"{human_bytes(sum(int(r.get('bytes') or 0) for r in freed if not r.get('recoverable')))}"
        " freed"
    )
    return lines


def _what(record: dict[str, Any]) -> str:
    # One Pulsar-metadata znode per record: its store and path, and whose leftover.
    if record.get("znode"):
        return f"{record.get('store')}:{record['znode']} of {record.get('ml_name')}"
    if record.get("ledger_id") is not None:
        return f"{record.get('ml_name')} ledger {record['ledger_id']}"
    return str(record.get("prefix") or record.get("ml_name") or "")
