"""The metadata store: managed ledgers and cursors in ZooKeeper.

Every change is a read-modify-write with the znode's version (compare-and-set). On a
version conflict the record is re-read and the change re-applied, so a trim, a writer's
rollover and a consumer's ack never lose each other's updates. Nothing here ever writes
with version -1.

Changes are given as *mutators*: functions that edit a freshly read record in place and
return whether to write. They are re-run on every retry, so they must decide from the
record they are given, never from state captured before the read.

Every write keeps the record's own framing (raw, or Pulsar's compression frame with its
codec) and is checked against the endpoint's ``max_record_bytes``
(``LEDGERGC_ZK_MAX_RECORD_BYTES``) before it is sent: a request over the server's
``jute.maxbuffer`` makes ZooKeeper drop the connection, which would stop the whole run
on every retry (``encode_for_znode``).

Two changes span several znodes and go in one ZooKeeper ``multi``, so that they are
decided and applied against one consistent state:

* ``commit_trim``: the trim's mark sets the managed-ledger record at the version it was
  decided from, *and* checks (or moves) every cursor at the version it was read at. A
  cursor that was reset, acked or deleted in between fails the whole multi; the trim then
  reads again and decides again.
* ``create_cursor_from_record``: a new cursor's initial position is computed from the
  record at a version, and the cursor is created in the same multi that re-sets the
  record at that version (same bytes, new version). So a trim that decided without this
  cursor fails its own multi, and a cursor created after a trim's mark starts at the
  oldest ledger still listed.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    UnimplementedError,
)
from kazoo.protocol.serialization import GetChildren, GetData

from ledger_gc.config.endpoints import DEFAULT_ZK_MAX_RECORD_BYTES, ZkEndpoint
from ledger_gc.config.zk_security import PULSAR_NAMES, Names
from ledger_gc.errors import (
    AlreadyExistsError,
    ConcurrentUpdateError,
    CursorNotFoundError,
    ManagedLedgerNotFoundError,
    MetadataAccessError,
    MetadataError,
    MetadataFormatError,
)
from ledger_gc.formats.framing import RAW, Framing
from ledger_gc.formats.records import (
    decode_managed_cursor_info_framed,
    decode_managed_ledger_info_framed,
    encode_for_znode,
)
from ledger_gc.metadata import multi_read, zk_access
from ledger_gc.metadata.read_budget import METER, ReadBudget, budget_for
from ledger_gc.metadata.zk_client import guarded, session
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.rules.metadata import namespaces, paths
from ledger_gc.state.batching import batches

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Pulsar's namespace policies (configuration store): v2 ``<tenant>/<ns>``, v1
#: ``<property>/<cluster>/<ns>`` (``rules.metadata.namespaces``).
POLICIES_ROOT = "/admin/policies"

# How many async calls are in flight at once when reading many znodes.
PIPELINE_WINDOW = 512
# Znodes read per call of ``iter_many_raw``: what of a whole tree's records is held at
# once (the records of 100,000 topics with 100 ledgers each are 300 MB read whole).
READ_CHUNK = 4096


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A record, the znode version it was read at (the CAS token) and its framing."""

    value: T
    version: int
    framing: Framing = RAW


@dataclass(frozen=True)
class CursorWrite:
    """A cursor record to write in a multi, at the version it was read at."""

    cursor: str
    info: ManagedCursorInfo
    version: int
    framing: Framing = RAW


# What one operation of a multi costs beyond its path and data (op header, version, ACL).
_MULTI_OP_OVERHEAD = 64


class MetadataStore:
    """Managed-ledger and cursor records over one kazoo session."""

    def __init__(
        self,
        client: KazooClient,
        hosts: str = "",
        max_cas_attempts: int = 64,
        max_record_bytes: int = DEFAULT_ZK_MAX_RECORD_BYTES,
        names: Names = PULSAR_NAMES,
        budget: ReadBudget | None = None,
    ) -> None:
        self.client = client
        # LEDGERGC_ZK_MAX_READS_PER_SECOND (read_budget.py): every znode read waits for
        # it, and is counted in the process's read meter.
        self.budget = budget
        self.hosts = hosts or str(getattr(client, "hosts", ""))
        # The variables of this session's TLS and SASL (Pulsar's or BookKeeper's), named
        # by a refusal's fix.
        self.names = names
        self.max_cas_attempts = max_cas_attempts
        self.max_record_bytes = max_record_bytes
        # Counted so benchmarks and tests can check how many writes an operation costs
        # (a multi is one write: one request, one transaction); per thread too, for
        # callers that work on several managed ledgers at once.
        self.writes = 0
        self._local = threading.local()
        self._count_lock = threading.Lock()
        # Records read ahead for the next update of their managed ledger (``reading_ahead``).
        self._read_ahead: dict[str, Versioned[ManagedLedgerInfo]] = {}

    def reading(self, reads: int) -> None:
        """Before ``reads`` znodes are read: wait for the budget, then count them (every
        read of this session goes through here, also a caller's own kazoo call)."""
        if self.budget is not None:
            self.budget.take(reads)
        METER.count(reads)

    def _wrote(self) -> None:
        with self._count_lock:
            self.writes += 1
        self._local.writes = self.thread_writes() + 1

    def thread_writes(self) -> int:
        """The writes this thread has made through this store."""
        return int(getattr(self._local, "writes", 0))

    @classmethod
    @contextmanager
    def open(cls, endpoint: ZkEndpoint) -> Iterator[MetadataStore]:
        """A store over a new session to ``endpoint`` (its read budget, its record limit,
        its variables named by a refusal), closed with the ``with`` block."""
        with session(endpoint) as client:
            yield cls(
                client,
                endpoint.hosts,
                max_record_bytes=endpoint.max_record_bytes,
                names=endpoint.names,
                budget=budget_for(endpoint.max_reads_per_second),
            )

    def _call(self, what: str, call: Callable[[], T]) -> T:
        return guarded(what, self.hosts, call)

    def refusal(
        self, what: str, permission: str, znode: str, checked: str | None = None
    ) -> MetadataAccessError:
        """The error of a refused operation (``NoAuth``): ``permission`` on ``checked``
        (``znode``, or its parent for a delete or create), naming the identity this session
        has, who has the permission, and what to set (``zk_access.refusal``)."""
        return zk_access.refusal(
            self.client,
            self.hosts,
            what=what,
            permission=permission,
            znode=znode,
            checked=checked,
            names=self.names,
        )

    def sync(self, path: str = "/") -> None:
        """Make the next reads see every write the leader had committed (ZooKeeper sync).

        A read from a follower may be behind; before a decision to delete, the GC syncs so
        that a ledger registered a moment ago on another server is seen.
        """
        self._call(f"syncing {path}", lambda: self.client.sync(path))

    # --- managed ledgers ---------------------------------------------------------------

    def list_managed_ledgers(
        self,
        *,
        sync: bool = False,
        include_v1: bool = False,
        policies: MetadataStore | None = None,
    ) -> list[str]:
        """Every managed-ledger name (``tenant/ns/persistent/topic``), sorted; with
        ``include_v1`` the v1 ones (``property/cluster/ns/persistent/topic``) too.
        ``policies``: the configuration store, where a level's shape needs
        ``/admin/policies`` (None: this store is it).

        Raises MetadataUnavailableError on any session trouble; a missing root is a store
        with no managed ledgers. Levels are read with pipelined calls.
        """
        tree = self.managed_ledger_tree(sync=sync, policies=policies)
        return list(tree.names) if include_v1 else tree.v2_names

    def managed_ledger_tree(
        self, *, sync: bool = False, policies: MetadataStore | None = None
    ) -> namespaces.ManagedLedgerTree:
        """The managed ledgers and namespaces under ``/managed-ledgers``, each
        ``<a>/<b>`` read as the v1 property/cluster, v2 namespace or both that it is
        (``rules.metadata.namespaces``); a level that cannot be told raises
        MetadataFormatError rather than hide topics or invent them.

        ``policies`` is the configuration store (Pulsar's ``configurationMetadataStoreUrl``),
        which holds ``/admin/policies`` where the tree alone does not tell; None: this
        store, when the two are one."""
        root = paths.MANAGED_LEDGERS_ROOT
        if sync:
            self.sync(root)
        self.reading(1)
        if not self._call("reading the root", lambda: self.client.exists(root)):
            return namespaces.ManagedLedgerTree((), frozenset(), exists=False)
        tenants = self.children_of_many([root])[0]
        levels = [
            f"{tenant}/{child}"
            for tenant, children in zip(
                tenants, self.children_of_many([f"{root}/{t}" for t in tenants]), strict=True
            )
            for child in children
        ]
        tree: dict[str, list[str]] = {}
        shapes = self._shapes(levels, tree, policies or self)
        found = {level for level in levels if shapes[level].namespace}
        found |= {
            f"{level}/{ns}" for level in levels for ns in shapes[level].v1_namespaces(tree[level])
        }
        domains = [f"{namespace}/{namespaces.DOMAIN}" for namespace in sorted(found)]
        unread = [domain for domain in domains if domain not in tree]
        tree.update(
            zip(unread, self.children_of_many([f"{root}/{d}" for d in unread]), strict=True)
        )
        names = [f"{domain}/{topic}" for domain in domains for topic in tree[domain]]
        return namespaces.ManagedLedgerTree(
            tuple(sorted(names)), frozenset(found), tenants=tuple(sorted(tenants))
        )

    def namespace_shapes(
        self, levels: Sequence[str], policies: MetadataStore | None = None
    ) -> dict[str, namespaces.Shape]:
        """What each existing ``/managed-ledgers/<a>/<b>`` of ``levels`` is (v1 cluster,
        v2 namespace or both); a level that does not exist is absent. ``policies``: the
        configuration store (None: this one)."""
        root = paths.MANAGED_LEDGERS_ROOT
        there = [
            level
            for level, got in zip(
                levels, self.get_many([f"{root}/{lv}" for lv in levels]), strict=True
            )
            if got is not None
        ]
        return self._shapes(there, {}, policies or self)

    def _shapes(
        self, levels: Sequence[str], tree: dict[str, list[str]], config: MetadataStore
    ) -> dict[str, namespaces.Shape]:
        """Judge each level (``namespaces.namespace_shape``), reading what it asks for
        level by level, pipelined (``/admin/policies`` from ``config``, the configuration
        store); ``tree`` keeps the children read (the topics too)."""
        data: dict[str, bool] = {}
        policies: dict[str, list[str] | None] = {}
        policy_json: dict[str, bool] = {}
        # Filled in as they are read.
        facts = namespaces.Facts(tree, data, policies, policy_json)
        shapes: dict[str, namespaces.Shape] = {}
        pending = list(levels)
        while pending:
            needs: list[namespaces.Need] = []
            for level in pending:
                got = namespaces.namespace_shape(level, facts)
                if isinstance(got, namespaces.Ambiguous):
                    raise MetadataFormatError(got.why)
                if isinstance(got, namespaces.Shape):
                    shapes[level] = got
                else:
                    needs.append(got)
            pending = [level for level in pending if level not in shapes]
            self._read_facts(needs, tree, data, policies, policy_json, config)
        return shapes

    def _read_facts(
        self,
        needs: list[namespaces.Need],
        tree: dict[str, list[str]],
        data: dict[str, bool],
        policies: dict[str, list[str] | None],
        policy_json: dict[str, bool],
        config: MetadataStore,
    ) -> None:
        """Read what ``namespace_shape`` asked for into the facts' maps, pipelined: the
        tree from this store, the policies (and whether each is JSON) from ``config``."""
        root = paths.MANAGED_LEDGERS_ROOT
        in_tree = sorted({path for need in needs for path in need.tree})
        in_data = sorted({path for need in needs for path in need.data})
        in_policies = sorted({path for need in needs for path in need.policies})
        if needs and not (in_tree or in_data or in_policies):
            raise RuntimeError("namespace_shape asked for nothing and decided nothing")
        listed = self.children_of_many([f"{root}/{p}" for p in in_tree])
        tree.update(zip(in_tree, listed, strict=True))
        got = self.get_many([f"{root}/{p}" for p in in_data])
        data.update((path, bool(read and read[0])) for path, read in zip(in_data, got, strict=True))
        where = [f"{POLICIES_ROOT}/{p}" for p in in_policies]
        for path, node, children in zip(
            in_policies, config.get_many(where), config.children_of_many(where), strict=True
        ):
            policies[path] = None if node is None else children
            policy_json[path] = node is not None and namespaces.is_policies(node[0])

    def children_of_many(self, znodes: Sequence[str]) -> list[list[str]]:
        """``get_children`` of many znodes, pipelined; a vanished znode has no children."""
        batched = self._multi_read(znodes, GetChildren, on_missing=list)
        if batched is not None:
            return batched
        return self._pipelined(znodes, self.client.get_children_async, on_missing=list)

    def children_with_stats(self, znodes: Sequence[str]) -> list[tuple[list[str], Any] | None]:
        """``getChildren2`` of many znodes, pipelined: each one's children and its own
        ``ZnodeStat`` from the same moment (ZooKeeper copies both under the node's lock;
        a multiRead has no such operation), or None where missing."""
        return self._pipelined(
            znodes,
            lambda path: self.client.get_children_async(path, include_data=True),
            on_missing=lambda: None,
        )

    def data_now(self, znode: str) -> bytes | None:
        """A znode's data as the leader has it now (``sync`` first; None: no such
        znode): what a restore compares with the audited bytes."""
        self.sync(znode)
        got = self.get_many_raw([znode])[0]
        return None if got is None else bytes(got[0] or b"")

    def iter_many_raw(self, znodes: Iterable[str]) -> Iterator[tuple[bytes, int] | None]:
        """``get_many_raw``, ``READ_CHUNK`` znodes at a time, as they are read: for a
        reader that keeps what it decodes, not the records (a whole cluster's), and
        that may name the znodes as they are asked (no list of every path)."""
        for chunk in batches(znodes, READ_CHUNK):
            yield from self.get_many_raw(chunk)

    def get_many_raw(self, znodes: Sequence[str]) -> list[tuple[bytes, int] | None]:
        """``get`` of many znodes, pipelined: (data, version), or None where missing."""
        return [None if r is None else (r[0], r[1].version) for r in self.get_many(znodes)]

    def get_many(self, znodes: Sequence[str]) -> list[tuple[bytes, Any] | None]:
        """``get`` of many znodes, pipelined: (data, ZnodeStat), or None where missing."""
        results = self._multi_read(znodes, GetData, on_missing=lambda: None)
        if results is None:
            results = self._pipelined(znodes, self.client.get_async, on_missing=lambda: None)
        return [None if r is None else (r[0], r[1]) for r in results]

    def _multi_read(self, znodes: Sequence[str], op: type, on_missing: Callable) -> list | None:
        """Batched reads (``multi_read``: kazoo's per-call cost made pipelined gets no
        faster than sequential ones); None when the server is older than ZooKeeper 3.6."""
        if len(znodes) < 2 or getattr(self.client, "_ledger_gc_no_multi_read", False):
            return None

        def run() -> list | None:
            try:
                got = multi_read.read_many(
                    self.client,
                    znodes,
                    op,
                    self.client._session_timeout / 1000,
                    before_request=self.reading,
                    per_request=self.budget.batch_limit() if self.budget else None,
                )
            except UnimplementedError:
                log.info("ZooKeeper at %s has no multiRead (< 3.6); reading one by one", self.hosts)
                self.client._ledger_gc_no_multi_read = True
                return None
            results = []
            for znode, result in zip(znodes, got, strict=True):
                if isinstance(result, NoNodeError):
                    results.append(on_missing())
                elif isinstance(result, NoAuthError):
                    raise self._read_refused(op, znode)
                elif isinstance(result, Exception):
                    raise result
                else:
                    results.append(result)
            return results

        return self._call(f"reading {len(znodes)} znodes", run)

    def _read_refused(self, op: type, znode: str) -> MetadataAccessError:
        """A read or listing refused: READ on the znode itself (a scan then stops: a
        scan that could not read everything never returns a part of it)."""
        verb = "listing" if op is GetChildren else "reading"
        return self.refusal(f"{verb} {znode}", zk_access.READ, znode)

    def _pipelined(self, znodes: Sequence[str], start: Callable, on_missing: Callable) -> list:
        op = GetChildren if start == self.client.get_children_async else GetData

        def run() -> list:
            results: list = []
            window_size = min(
                PIPELINE_WINDOW, self.budget.batch_limit() if self.budget else PIPELINE_WINDOW
            )
            for offset in range(0, len(znodes), window_size):
                paths = znodes[offset : offset + window_size]
                self.reading(len(paths))
                window = [start(path) for path in paths]
                for path, pending in zip(paths, window, strict=True):
                    try:
                        results.append(pending.get(timeout=self.client._session_timeout / 1000))
                    except NoNodeError:
                        results.append(on_missing())
                    except NoAuthError:
                        raise self._read_refused(op, path) from None
            return results

        return self._call(f"reading {len(znodes)} znodes", run)

    def managed_ledger_exists(self, name: str) -> bool:
        path = paths.managed_ledger_path(name)
        self.reading(1)
        return self._call(f"checking {path}", lambda: self.client.exists(path)) is not None

    def get_managed_ledger(self, name: str) -> Versioned[ManagedLedgerInfo]:
        return self._get_managed_ledger_raw(name)[0]

    def _get_managed_ledger_raw(self, name: str) -> tuple[Versioned[ManagedLedgerInfo], bytes]:
        path = paths.managed_ledger_path(name)
        self.reading(1)
        try:
            data, stat = self._call(f"reading {path}", lambda: self.client.get(path))
        except NoNodeError as exc:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} not found ({path})") from exc
        info, framing = decode_managed_ledger_info_framed(data, path=path, allow_empty=True)
        return Versioned(info, stat.version, framing), data

    def encode_managed_ledger(
        self, name: str, info: ManagedLedgerInfo, framing: Framing, budget: int = 0
    ) -> tuple[bytes, Framing]:
        """The bytes a write of ``info`` sends, within the record-size limit (less
        ``budget`` bytes that other operations of the same request need)."""
        return encode_for_znode(
            info, framing, self.max_record_bytes - budget, path=paths.managed_ledger_path(name)
        )

    def create_managed_ledger(
        self, name: str, info: ManagedLedgerInfo | None = None
    ) -> Versioned[ManagedLedgerInfo]:
        info = info if info is not None else ManagedLedgerInfo()
        path = paths.managed_ledger_path(name)
        data, _ = self.encode_managed_ledger(name, info, RAW)
        try:
            self._call(f"creating {path}", lambda: self.client.create(path, data, makepath=True))
        except NodeExistsError as exc:
            raise AlreadyExistsError(f"managed ledger {name} exists already") from exc
        self._wrote()
        return Versioned(info, 0)

    def update_managed_ledger(
        self, name: str, mutate: Callable[[ManagedLedgerInfo], bool]
    ) -> Versioned[ManagedLedgerInfo]:
        """Apply ``mutate`` with compare-and-set until it sticks; return what was written.

        When ``mutate`` returns False nothing is written and the record read is returned.
        The first attempt starts from the record read ahead for it (``reading_ahead``),
        if any, instead of reading; a conflict reads again as always.
        """
        path = paths.managed_ledger_path(name)
        return self._update(
            path,
            read=lambda: self.get_managed_ledger(name),
            mutate=mutate,
            first=self._read_ahead.pop(name, None),
        )

    @contextmanager
    def reading_ahead(self, records: Mapping[str, Versioned[ManagedLedgerInfo]]) -> Iterator[None]:
        """Within the block, the next ``update_managed_ledger`` of each named managed
        ledger starts from the record given (read by the caller for many at once:
        ``read_managed_ledgers``, each decoded for that update alone) instead of one read
        of its own. What the block did not use is dropped at its end: a record read
        ahead is never used long after it was read."""
        self._read_ahead.update(records)
        try:
            yield
        finally:
            for name in records:
                self._read_ahead.pop(name, None)

    def read_managed_ledgers(
        self, names: Sequence[str]
    ) -> list[tuple[Versioned[ManagedLedgerInfo], int] | None]:
        """Many records at once (batched reads), each with its creation zxid; None where
        a record is missing or does not decode (its own read then says why)."""
        ml_paths = [paths.managed_ledger_path(name) for name in names]
        records: list[tuple[Versioned[ManagedLedgerInfo], int] | None] = []
        for path, got in zip(ml_paths, self.get_many(ml_paths), strict=True):
            if got is None:
                records.append(None)
                continue
            data, stat = got
            try:
                info, framing = decode_managed_ledger_info_framed(data, path=path, allow_empty=True)
            except MetadataFormatError:
                records.append(None)
                continue
            records.append((Versioned(info, stat.version, framing), stat.czxid))
        return records

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
        self._wrote()

    # --- cursors -----------------------------------------------------------------------

    def list_cursors(self, name: str) -> list[str]:
        path = paths.managed_ledger_path(name)
        self.reading(1)
        try:
            return sorted(self._call(f"listing {path}", lambda: self.client.get_children(path)))
        except NoNodeError as exc:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} not found ({path})") from exc

    def get_cursor(self, name: str, cursor: str) -> Versioned[ManagedCursorInfo]:
        path = paths.cursor_path(name, cursor)
        self.reading(1)
        try:
            data, stat = self._call(f"reading {path}", lambda: self.client.get(path))
        except NoNodeError as exc:
            raise CursorNotFoundError(f"cursor {cursor} of {name} not found ({path})") from exc
        info, framing = decode_managed_cursor_info_framed(data, path=path)
        return Versioned(info, stat.version, framing)

    def encode_cursor(
        self,
        name: str,
        cursor: str,
        info: ManagedCursorInfo,
        framing: Framing = RAW,
    ) -> tuple[bytes, Framing]:
        return encode_for_znode(
            info, framing, self.max_record_bytes, path=paths.cursor_path(name, cursor)
        )

    def create_cursor(
        self, name: str, cursor: str, info: ManagedCursorInfo
    ) -> Versioned[ManagedCursorInfo]:
        path = paths.cursor_path(name, cursor)
        data, _ = self.encode_cursor(name, cursor, info)
        try:
            self._call(f"creating {path}", lambda: self.client.create(path, data))
        except NodeExistsError as exc:
            raise AlreadyExistsError(f"cursor {cursor} of {name} exists already") from exc
        except NoNodeError as exc:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} not found") from exc
        self._wrote()
        return Versioned(info, 0)

    def put_cursor(
        self, name: str, cursor: str, info: ManagedCursorInfo, version: int
    ) -> Versioned[ManagedCursorInfo]:
        """Write a cursor at ``version``; raises BadVersionError-derived ConcurrentUpdateError."""
        path = paths.cursor_path(name, cursor)
        data, _ = self.encode_cursor(name, cursor, info)
        try:
            stat = self._call(f"writing {path}", lambda: self.client.set(path, data, version))
        except BadVersionError as exc:
            raise ConcurrentUpdateError(f"cursor {cursor} of {name} changed concurrently") from exc
        except NoNodeError as exc:
            raise CursorNotFoundError(f"cursor {cursor} of {name} not found") from exc
        self._wrote()
        return Versioned(info, stat.version)

    def update_cursor(
        self, name: str, cursor: str, mutate: Callable[[ManagedCursorInfo], bool]
    ) -> Versioned[ManagedCursorInfo]:
        path = paths.cursor_path(name, cursor)
        return self._update(path, read=lambda: self.get_cursor(name, cursor), mutate=mutate)

    def create_cursor_from_record(
        self,
        name: str,
        cursor: str,
        initial: Callable[[ManagedLedgerInfo], ManagedCursorInfo],
    ) -> Versioned[ManagedCursorInfo]:
        """Create a cursor whose first position ``initial`` computes from the record, in
        one multi with a re-set of that record at the version read (see the module
        docstring: a trim deciding concurrently then sees a changed record)."""
        ml_path = paths.managed_ledger_path(name)
        path = paths.cursor_path(name, cursor)
        for attempt in range(self.max_cas_attempts):
            current, raw = self._get_managed_ledger_raw(name)
            info = initial(current.value)
            data, _ = self.encode_cursor(name, cursor, info)
            results = self._multi_or_backoff(
                f"creating {path}",
                [("set_data", ml_path, raw, current.version), ("create", path, data)],
                attempt,
                missing=ManagedLedgerNotFoundError(f"managed ledger {name} not found ({ml_path})"),
                exists=AlreadyExistsError(f"cursor {cursor} of {name} exists already"),
            )
            if results is not None:
                return Versioned(info, 0)
        raise ConcurrentUpdateError(
            f"{path}: gave up after {self.max_cas_attempts} version conflicts; retry later"
        )

    def update_cursor_against_record(
        self,
        name: str,
        cursor: str,
        mutate: Callable[[ManagedLedgerInfo, ManagedCursorInfo], None],
    ) -> Versioned[ManagedCursorInfo]:
        """Write a cursor decided from the managed ledger's record, in one multi that
        checks the record's version (a reset must not land in a ledger a trim just
        dropped); re-read and re-apply on any version conflict."""
        ml_path = paths.managed_ledger_path(name)
        path = paths.cursor_path(name, cursor)
        for attempt in range(self.max_cas_attempts):
            record = self.get_managed_ledger(name)
            current = self.get_cursor(name, cursor)
            mutate(record.value, current.value)
            data, framing = self.encode_cursor(name, cursor, current.value, current.framing)
            results = self._multi_or_backoff(
                f"writing {path}",
                [("check", ml_path, record.version), ("set_data", path, data, current.version)],
                attempt,
                missing=CursorNotFoundError(f"cursor {cursor} of {name} not found ({path})"),
            )
            if results is not None:
                return Versioned(current.value, results[-1].version, framing)
        raise ConcurrentUpdateError(
            f"{path}: gave up after {self.max_cas_attempts} version conflicts; retry later"
        )

    def _multi_or_backoff(
        self,
        what: str,
        operations: Sequence[tuple[Any, ...]],
        attempt: int,
        *,
        missing: Exception,
        exists: Exception | None = None,
    ) -> list | None:
        """Run one multi of ``(method, *args)`` operations; its results when it applied,
        None after a short backoff when a version moved (the caller re-reads and tries
        again), ``missing``/``exists`` when a znode is gone or already there."""

        def run() -> list:
            transaction = self.client.transaction()
            for method, *args in operations:
                getattr(transaction, method)(*args)
            return transaction.commit()

        results = self._call(what, run)
        failure = _first_failure(results)
        if failure is None:
            self._wrote()
            return results
        if exists is not None and isinstance(failure, NodeExistsError):
            raise exists
        if isinstance(failure, NoNodeError):
            raise missing
        if not isinstance(failure, BadVersionError):
            raise MetadataError(f"{what} failed: {failure!r}")
        time.sleep(random.uniform(0, min(0.05, 0.002 * 2**attempt)))
        return None

    def encode_trim(
        self,
        name: str,
        record: ManagedLedgerInfo,
        framing: Framing,
        cursor_checks: Sequence[tuple[str, int]],
        cursor_writes: Sequence[CursorWrite],
    ) -> tuple[bytes, Framing, list[tuple[CursorWrite, bytes]]]:
        """The bytes of a trim's multi (record, moved cursors), all within the limit of
        one request; RecordTooLargeError when they would not fit."""
        cursor_data = [
            (write, self.encode_cursor(name, write.cursor, write.info, write.framing)[0])
            for write in cursor_writes
        ]
        ml_path = paths.managed_ledger_path(name)
        budget = (
            sum(
                len(paths.cursor_path(name, cursor)) + _MULTI_OP_OVERHEAD
                for cursor, _ in cursor_checks
            )
            + sum(
                len(paths.cursor_path(name, w.cursor)) + len(data) + _MULTI_OP_OVERHEAD
                for w, data in cursor_data
            )
            + len(ml_path)
            + _MULTI_OP_OVERHEAD
        )
        data, written_framing = self.encode_managed_ledger(name, record, framing, budget)
        return data, written_framing, cursor_data

    def commit_trim(
        self,
        name: str,
        record: ManagedLedgerInfo,
        record_version: int,
        framing: Framing,
        cursor_checks: Sequence[tuple[str, int]],
        cursor_writes: Sequence[CursorWrite],
        record_czxid: int | None = None,
    ) -> Versioned[ManagedLedgerInfo] | None:
        """Write the trim's record only if the record and every cursor are still at the
        versions the decision was made from; None when any of them changed (re-read and
        decide again). One multi: the mark and the cursor moves happen together or not.

        ``record_czxid``: the record's creation zxid as read. A topic deleted and created
        again starts its versions again, so a version alone may match a *new* record that
        the decision never saw (and the multi would write the old topic's list over it).
        A multi cannot check a creation zxid, so it is checked just before the multi
        (one round trip of window instead of the whole decision's) and again in the
        multi's answer.

        Raises RecordTooLargeError, before sending, when the request would not fit.
        """
        ml_path = paths.managed_ledger_path(name)
        data, written_framing, cursor_data = self.encode_trim(
            name, record, framing, cursor_checks, cursor_writes
        )
        if record_czxid is not None:
            self.reading(1)
            now = self._call(f"checking {ml_path}", lambda: self.client.exists(ml_path))
            if now is None or now.czxid != record_czxid:
                return None  # deleted, or deleted and created again: read and decide again

        def run() -> list:
            transaction = self.client.transaction()
            for cursor, version in cursor_checks:
                transaction.check(paths.cursor_path(name, cursor), version)
            for write, encoded in cursor_data:
                transaction.set_data(paths.cursor_path(name, write.cursor), encoded, write.version)
            transaction.set_data(ml_path, data, record_version)
            return transaction.commit()

        results = self._call(f"writing {ml_path} with {len(cursor_checks)} cursor checks", run)
        failure = _first_failure(results)
        if failure is not None:
            if isinstance(failure, BadVersionError | NoNodeError):
                return None
            raise MetadataError(f"writing {ml_path} failed: {failure!r}")
        self._wrote()
        stat = results[-1]
        if record_czxid is not None and stat.czxid != record_czxid:
            raise MetadataError(
                f"{ml_path} was deleted and created again within the trim's last round trip, "
                "and the trim's mark was written over the new record; check that topic's "
                "ledger list (its data is kept: orphan removal waits out the grace window)"
            )
        return Versioned(record, stat.version, written_framing)

    def delete_cursor(self, name: str, cursor: str) -> None:
        path = paths.cursor_path(name, cursor)
        try:
            self._call(f"deleting {path}", lambda: self.client.delete(path))
        except NoNodeError:
            return
        self._wrote()

    # --- the compare-and-set loop ------------------------------------------------------

    def _update(
        self,
        path: str,
        read: Callable[[], Versioned[T]],
        mutate: Callable[[T], bool],
        first: Versioned[T] | None = None,
    ) -> Versioned[T]:
        for attempt in range(self.max_cas_attempts):
            current = first if first is not None and attempt == 0 else read()
            if not mutate(current.value):
                return current
            data, framing = encode_for_znode(
                current.value,  # type: ignore[arg-type]
                current.framing,
                self.max_record_bytes,
                path=path,
            )
            try:
                stat = self._call(
                    f"writing {path}",
                    functools.partial(self.client.set, path, data, current.version),
                )
            except BadVersionError:
                # Someone wrote in between: re-read, re-apply. Jitter keeps many writers
                # of one hot znode from retrying in lock step.
                time.sleep(random.uniform(0, min(0.05, 0.002 * 2**attempt)))
                continue
            except NoNodeError as exc:
                raise ManagedLedgerNotFoundError(f"{path} was deleted during an update") from exc
            self._wrote()
            return Versioned(current.value, stat.version, framing)
        raise ConcurrentUpdateError(
            f"{path}: gave up after {self.max_cas_attempts} version conflicts; "
            "too many concurrent writers, retry later"
        )


def _first_failure(results: Sequence[object]) -> Exception | None:
    """The error that failed a multi (the others are RolledBackError), or None."""
    errors = [r for r in results if isinstance(r, Exception)]
    real = [e for e in errors if not isinstance(e, RolledBackError)]
    return real[0] if real else (errors[0] if errors else None)
