"""The metadata store: managed ledgers and cursors in ZooKeeper.

Every change is a read-modify-write with the znode's version (compare-and-set). On a
version conflict the record is re-read and the change re-applied, so a trim, a writer's
rollover and a consumer's ack never lose each other's updates. Nothing here ever writes
with version -1.

Changes are given as *mutators*: functions that edit a freshly read record in place and
return whether to write. They are re-run on every retry, so they must decide from the
record they are given, never from state captured before the read.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    UnimplementedError,
)
from kazoo.protocol.serialization import GetChildren, GetData

from ledger_gc import formats
from ledger_gc.errors import (
    AlreadyExistsError,
    ConcurrentUpdateError,
    CursorNotFoundError,
    ManagedLedgerNotFoundError,
    MetadataError,
)
from ledger_gc.metadata import multi_read, paths
from ledger_gc.metadata.zk_client import guarded, session
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

# How many async calls are in flight at once when reading many znodes.
PIPELINE_WINDOW = 512


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A record and the znode version it was read at (the CAS token)."""

    value: T
    version: int


class MetadataStore:
    """Managed-ledger and cursor records over one kazoo session."""

    def __init__(self, client: KazooClient, hosts: str = "", max_cas_attempts: int = 64) -> None:
        self.client = client
        self.hosts = hosts or str(getattr(client, "hosts", ""))
        self.max_cas_attempts = max_cas_attempts
        # Counted so benchmarks and tests can check how many writes an operation costs.
        self.writes = 0

    @classmethod
    @contextmanager
    def open(cls, settings: Settings) -> Iterator[MetadataStore]:
        with session(settings) as client:
            yield cls(client, settings.zk_hosts)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        return guarded(what, self.hosts, call)

    def sync(self, path: str = "/") -> None:
        """Make the next reads see every write the leader had committed (ZooKeeper sync).

        A read from a follower may be behind; before a decision to delete, the GC syncs so
        that a ledger registered a moment ago on another server is seen.
        """
        self._call(f"syncing {path}", lambda: self.client.sync(path))

    # --- managed ledgers ---------------------------------------------------------------

    def list_managed_ledgers(self, *, sync: bool = False) -> list[str]:
        """Every managed-ledger name (``tenant/ns/persistent/topic``), sorted.

        Raises MetadataUnavailableError on any session trouble; a missing root is a store
        with no managed ledgers. Levels are read with pipelined calls.
        """
        if sync:
            self.sync(paths.MANAGED_LEDGERS_ROOT)
        if not self._call(
            "reading the root", lambda: self.client.exists(paths.MANAGED_LEDGERS_ROOT)
        ):
            return []
        level = [paths.MANAGED_LEDGERS_ROOT]
        # tenants, namespaces, the "persistent" domain, topics
        for depth in range(4):
            children = self.children_of_many(level)
            level = [
                f"{parent}/{child}"
                for parent, names in zip(level, children, strict=True)
                for child in names
                if depth != 2 or child == "persistent"
            ]
        return sorted(paths.ml_name_from_path(path) for path in level)

    def children_of_many(self, znodes: Sequence[str]) -> list[list[str]]:
        """``get_children`` of many znodes, pipelined; a vanished znode has no children."""
        batched = self._multi_read(znodes, GetChildren, on_missing=list)
        if batched is not None:
            return batched
        return self._pipelined(znodes, self.client.get_children_async, on_missing=list)

    def get_many_raw(self, znodes: Sequence[str]) -> list[tuple[bytes, int] | None]:
        """``get`` of many znodes, pipelined: (data, version), or None where missing."""
        results = self._multi_read(znodes, GetData, on_missing=lambda: None)
        if results is None:
            results = self._pipelined(znodes, self.client.get_async, on_missing=lambda: None)
        return [None if r is None else (r[0], r[1].version) for r in results]

    def _multi_read(self, znodes: Sequence[str], op: type, on_missing: Callable) -> list | None:
        """Batched reads (``multi_read``: kazoo's per-call cost made pipelined gets no
        faster than sequential ones); None when the server is older than ZooKeeper 3.6."""
        if len(znodes) < 2 or getattr(self.client, "_ledger_gc_no_multi_read", False):
            return None

        def run() -> list | None:
            try:
                got = multi_read.read_many(
                    self.client, znodes, op, self.client._session_timeout / 1000
                )
            except UnimplementedError:
                log.info("ZooKeeper at %s has no multiRead (< 3.6); reading one by one",
                         self.hosts)
                self.client._ledger_gc_no_multi_read = True
                return None
            results = []
            for result in got:
                if isinstance(result, NoNodeError):
                    results.append(on_missing())
                elif isinstance(result, Exception):
                    raise result
                else:
                    results.append(result)
            return results

        return self._call(f"reading {len(znodes)} znodes", run)

    def _pipelined(self, znodes: Sequence[str], start: Callable, on_missing: Callable) -> list:
        def run() -> list:
            results: list = []
            for offset in range(0, len(znodes), PIPELINE_WINDOW):
                window = [start(path) for path in znodes[offset : offset + PIPELINE_WINDOW]]
                for pending in window:
                    try:
                        results.append(pending.get(timeout=self.client._session_timeout / 1000))
                    except NoNodeError:
                        results.append(on_missing())
            return results

        return self._call(f"reading {len(znodes)} znodes", run)

    def managed_ledger_exists(self, name: str) -> bool:
        path = paths.managed_ledger_path(name)
        return self._call(f"checking {path}", lambda: self.client.exists(path)) is not None

    def get_managed_ledger(self, name: str) -> Versioned[ManagedLedgerInfo]:
        path = paths.managed_ledger_path(name)
        try:
            data, stat = self._call(f"reading {path}", lambda: self.client.get(path))
        except NoNodeError as exc:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} not found ({path})") from exc
        info = formats.decode_managed_ledger_info(data, path=path, allow_empty=True)
        return Versioned(info, stat.version)

    def create_managed_ledger(
        self, name: str, info: ManagedLedgerInfo | None = None
    ) -> Versioned[ManagedLedgerInfo]:
        info = info if info is not None else ManagedLedgerInfo()
        path = paths.managed_ledger_path(name)
        data = formats.encode_managed_ledger_info(info)
        try:
            self._call(f"creating {path}", lambda: self.client.create(path, data, makepath=True))
        except NodeExistsError as exc:
            raise AlreadyExistsError(f"managed ledger {name} exists already") from exc
        self.writes += 1
        return Versioned(info, 0)

    def update_managed_ledger(
        self, name: str, mutate: Callable[[ManagedLedgerInfo], bool]
    ) -> Versioned[ManagedLedgerInfo]:
        """Apply ``mutate`` with compare-and-set until it sticks; return what was written.

        When ``mutate`` returns False nothing is written and the record read is returned.
        """
        path = paths.managed_ledger_path(name)
        return self._update(
            path,
            read=lambda: self.get_managed_ledger(name),
            encode=formats.encode_managed_ledger_info,
            mutate=mutate,
        )

    def delete_managed_ledger_node(self, name: str, version: int) -> None:
        """Remove the managed ledger's znode, only at ``version`` (cursors go first)."""
        path = paths.managed_ledger_path(name)
        try:
            self._call(f"deleting {path}", lambda: self.client.delete(path, version=version))
        except NoNodeError:
            return
        except BadVersionError as exc:
            raise ConcurrentUpdateError(
                f"managed ledger {name} changed while it was being deleted; retry the delete"
            ) from exc
        except NotEmptyError as exc:
            raise MetadataError(
                f"managed ledger {name} still has cursors; delete them first"
            ) from exc
        self.writes += 1

    # --- cursors -----------------------------------------------------------------------

    def list_cursors(self, name: str) -> list[str]:
        path = paths.managed_ledger_path(name)
        try:
            return sorted(self._call(f"listing {path}", lambda: self.client.get_children(path)))
        except NoNodeError as exc:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} not found ({path})") from exc

    def get_cursor(self, name: str, cursor: str) -> Versioned[ManagedCursorInfo]:
        path = paths.cursor_path(name, cursor)
        try:
            data, stat = self._call(f"reading {path}", lambda: self.client.get(path))
        except NoNodeError as exc:
            raise CursorNotFoundError(f"cursor {cursor} of {name} not found ({path})") from exc
        return Versioned(formats.decode_managed_cursor_info(data, path=path), stat.version)

    def create_cursor(
        self, name: str, cursor: str, info: ManagedCursorInfo
    ) -> Versioned[ManagedCursorInfo]:
        path = paths.cursor_path(name, cursor)
        data = formats.encode_managed_cursor_info(info)
        try:
            self._call(f"creating {path}", lambda: self.client.create(path, data))
        except NodeExistsError as exc:
            raise AlreadyExistsError(f"cursor {cursor} of {name} exists already") from exc
        except NoNodeError as exc:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} not found") from exc
        self.writes += 1
        return Versioned(info, 0)

    def put_cursor(
        self, name: str, cursor: str, info: ManagedCursorInfo, version: int
    ) -> Versioned[ManagedCursorInfo]:
        """Write a cursor at ``version``; raises BadVersionError-derived ConcurrentUpdateError."""
        path = paths.cursor_path(name, cursor)
        data = formats.encode_managed_cursor_info(info)
        try:
            stat = self._call(f"writing {path}", lambda: self.client.set(path, data, version))
        except BadVersionError as exc:
            raise ConcurrentUpdateError(f"cursor {cursor} of {name} changed concurrently") from exc
        except NoNodeError as exc:
            raise CursorNotFoundError(f"cursor {cursor} of {name} not found") from exc
        self.writes += 1
        return Versioned(info, stat.version)

    def update_cursor(
        self, name: str, cursor: str, mutate: Callable[[ManagedCursorInfo], bool]
    ) -> Versioned[ManagedCursorInfo]:
        return self._update(
            paths.cursor_path(name, cursor),
            read=lambda: self.get_cursor(name, cursor),
            encode=formats.encode_managed_cursor_info,
            mutate=mutate,
        )

    def delete_cursor(self, name: str, cursor: str) -> None:
        path = paths.cursor_path(name, cursor)
        try:
            self._call(f"deleting {path}", lambda: self.client.delete(path))
        except NoNodeError:
            return
        self.writes += 1

    # --- the compare-and-set loop ------------------------------------------------------

    def _update(
        self,
        path: str,
        read: Callable[[], Versioned[T]],
        encode: Callable[[T], bytes],
        mutate: Callable[[T], bool],
    ) -> Versioned[T]:
        for attempt in range(self.max_cas_attempts):
            current = read()
            if not mutate(current.value):
                return current
            data = encode(current.value)
            try:
                stat = self._call(
                    f"writing {path}",
                    lambda data=data, version=current.version: self.client.set(path, data, version),
                )
            except BadVersionError:
                # Someone wrote in between: re-read, re-apply. Jitter keeps many writers
                # of one hot znode from retrying in lock step.
                time.sleep(random.uniform(0, min(0.05, 0.002 * 2**attempt)))
                continue
            except NoNodeError as exc:
                raise ManagedLedgerNotFoundError(f"{path} was deleted during an update") from exc
            self.writes += 1
            return Versioned(current.value, stat.version)
        raise ConcurrentUpdateError(
            f"{path}: gave up after {self.max_cas_attempts} version conflicts; "
            "too many concurrent writers, retry later"
        )
