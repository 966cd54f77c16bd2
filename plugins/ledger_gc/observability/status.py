"""The state of the store, as ``ledgergc status`` shows it.

Metadata is read with pipelined calls (every managed ledger, then every cursor), and the
bucket is listed once and summed per managed ledger, so the command stays usable on a
large store. It only reads.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from ledger_gc.errors import LedgerGcError
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.formats.records import decode_managed_cursor_info, decode_managed_ledger_info
from ledger_gc.ledger.cursor import mark_delete_of
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.storage.keys import parse_key
from ledger_gc.storage.s3 import LedgerStorage


@dataclass
class CursorStatus:
    name: str
    mark_delete: str
    individually_deleted_ranges: int
    last_active: int


@dataclass
class ManagedLedgerStatus:
    name: str
    ledgers: list[dict[str, int]]
    markers: list[dict[str, Any]]
    cursors: list[CursorStatus]
    metadata_bytes: int
    storage_objects: int | None = None
    storage_bytes: int | None = None
    error: str | None = None  # its record or a cursor could not be decoded


@dataclass
class StoreStatus:
    zk_hosts: str
    bucket: str
    prefix: str
    managed_ledgers: list[ManagedLedgerStatus] = field(default_factory=list)
    foreign_objects: int | None = None
    foreign_bytes: int | None = None
    orphaned_objects: int | None = None  # objects of no known managed ledger

    def totals(self, now_ms: int) -> dict[str, Any]:
        markers = [m for ml in self.managed_ledgers for m in ml.markers]
        oldest = min((m["marked_at"] for m in markers), default=None)
        storage = [ml.storage_bytes for ml in self.managed_ledgers]
        return {
            "managed_ledgers": len(self.managed_ledgers),
            "ledgers": sum(len(ml.ledgers) for ml in self.managed_ledgers),
            "cursors": sum(len(ml.cursors) for ml in self.managed_ledgers),
            "metadata_bytes": sum(ml.metadata_bytes for ml in self.managed_ledgers),
            "storage_bytes": None if None in storage else sum(s or 0 for s in storage),
            "pending_markers": len(markers),
            "pending_marker_bytes": sum(m["size"] for m in markers),
            "oldest_marker_age_seconds": None if oldest is None else (now_ms - oldest) / 1000,
        }

    def to_dict(self, now_ms: int | None = None) -> dict[str, Any]:
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        data = asdict(self)
        data["totals"] = self.totals(now)
        return data


def collect_status(
    store: MetadataStore,
    storage: LedgerStorage | None,
    *,
    ml_filter: str | None = None,
    policies: MetadataStore | None = None,
) -> StoreStatus:
    """Read the store's state. ``storage=None`` skips the bucket listing; ``policies``:
    the configuration store (None: ``store``)."""
    names = store.list_managed_ledgers(policies=policies)
    if ml_filter:
        names = [n for n in names if n == ml_filter or n.startswith(ml_filter.rstrip("/") + "/")]
    ml_paths = [paths.managed_ledger_path(n) for n in names]
    raw_infos = store.get_many_raw(ml_paths)
    cursor_names = store.children_of_many(ml_paths)
    cursor_paths = [
        paths.cursor_path(name, cursor)
        for name, cursors in zip(names, cursor_names, strict=True)
        for cursor in cursors
    ]
    raw_cursors = iter(store.get_many_raw(cursor_paths))

    status = StoreStatus(
        zk_hosts=store.hosts,
        bucket=storage.bucket if storage else "",
        prefix=storage.prefix if storage else "",
    )
    for name, path, raw, cursors in zip(names, ml_paths, raw_infos, cursor_names, strict=True):
        cursor_raw = [next(raw_cursors) for _ in cursors]
        if raw is None:
            continue  # deleted between the listing and the read
        try:
            status.managed_ledgers.append(_ml_status(name, path, raw[0], cursors, cursor_raw))
        except LedgerGcError as exc:
            # One unreadable managed ledger is shown as such; the others still are.
            status.managed_ledgers.append(ManagedLedgerStatus(name, [], [], [], 0, error=str(exc)))
    if storage is not None:
        _add_storage_usage(status, storage, whole_store=not ml_filter)
    return status


def _ml_status(
    name: str,
    path: str,
    raw: bytes,
    cursors: list[str],
    cursor_raw: list[tuple[bytes, int] | None],
) -> ManagedLedgerStatus:
    info = decode_managed_ledger_info(raw, path=path, allow_empty=True)
    ledgers = [
        {
            "ledger_id": li.ledgerId,
            "entries": li.entries,
            "size": li.size,
            "timestamp": li.timestamp,
        }
        for li in sorted(info.ledgerInfo, key=lambda li: li.ledgerId)
    ]
    markers = [
        {
            "ledger_id": ledger_id,
            "size": int(value["size"]),
            "entries": int(value["entries"]),
            "marked_at": int(value["markedAt"]),
            "attempts": int(value.get("attempts", 0)),
            "last_error": value.get("lastError"),
        }
        for ledger_id, value in sorted(deletable_markers(info, path=path).items())
    ]
    cursor_status = []
    for cursor, craw in zip(cursors, cursor_raw, strict=True):
        if craw is None:
            continue
        cinfo = decode_managed_cursor_info(craw[0], path=paths.cursor_path(name, cursor))
        cursor_status.append(
            CursorStatus(
                name=cursor,
                mark_delete=str(mark_delete_of(cinfo)),
                individually_deleted_ranges=len(cinfo.individualDeletedMessages),
                last_active=cinfo.lastActive,
            )
        )
    return ManagedLedgerStatus(
        name=name,
        ledgers=ledgers,
        markers=markers,
        cursors=cursor_status,
        metadata_bytes=sum(li["size"] for li in ledgers),
    )


def _add_storage_usage(status: StoreStatus, storage: LedgerStorage, whole_store: bool) -> None:
    objects: dict[str, int] = defaultdict(int)
    sizes: dict[str, int] = defaultdict(int)
    foreign_objects = foreign_bytes = 0
    for obj in storage.iter_objects(storage.store.key_prefix):
        parsed = parse_key(storage.prefix, obj.key)
        if parsed.is_block and parsed.ml_name is not None:
            objects[parsed.ml_name] += 1
            sizes[parsed.ml_name] += obj.size
        else:
            foreign_objects += 1
            foreign_bytes += obj.size
    known = set()
    for ml in status.managed_ledgers:
        ml.storage_objects = objects.get(ml.name, 0)
        ml.storage_bytes = sizes.get(ml.name, 0)
        known.add(ml.name)
    if whole_store:
        status.foreign_objects = foreign_objects
        status.foreign_bytes = foreign_bytes
        status.orphaned_objects = sum(n for name, n in objects.items() if name not in known)
