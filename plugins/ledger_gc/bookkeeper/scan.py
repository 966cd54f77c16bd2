"""BookKeeper's ledger metadata, listed and read from ZooKeeper.

``read_layout`` reads ``<root>/LAYOUT`` (which ledger manager names the znodes);
``list_leaves`` walks the tree level by level with pipelined ``get_children`` and
lists each leaf directory with its stat (``getChildren2``: what the record cache
checks, ``rules/bookkeeper/record_cache.py``); ``read_ledgers`` reads the records,
pipelined, and decodes each (``records``); ``ledger_of_record`` turns a record, read
now or cached, into the ``BkLedger`` the classification judges.

The listing fails closed: a lost session raises, never returns fewer ledgers. A znode
that vanishes between the listing and the read was deleted meanwhile (a ledger deleted
by Pulsar) and is simply absent. A znode in the tree whose name is not a ledger's is
counted (``Listing.not_ledgers``), never read as one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ledger_gc.config.endpoints import BookKeeperEndpoint, ZkEndpoint
from ledger_gc.errors import ConfigError
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.bookkeeper import ledger_paths
from ledger_gc.rules.bookkeeper.classify import BkLedger, PulsarTags
from ledger_gc.rules.bookkeeper.ledger_index import LeafIds
from ledger_gc.rules.bookkeeper.record_cache import DirectoryState
from ledger_gc.rules.bookkeeper.records import LedgerRecord, RecordError, decode_record
from ledger_gc.state.batching import batches

log = logging.getLogger(__name__)

LAYOUT_ZNODE = "LAYOUT"
#: ``LedgerLayout``'s manager factory class (or the old short type name) -> layout.
_FACTORIES = {
    "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory": ledger_paths.HIERARCHICAL,
    "org.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory": (
        ledger_paths.HIERARCHICAL
    ),
    "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory": (
        ledger_paths.LONG_HIERARCHICAL
    ),
    "org.apache.bookkeeper.meta.FlatLedgerManagerFactory": ledger_paths.FLAT,
    "hierarchical": ledger_paths.HIERARCHICAL,
    "legacyhierarchical": ledger_paths.HIERARCHICAL,
    "longhierarchical": ledger_paths.LONG_HIERARCHICAL,
    "flat": ledger_paths.FLAT,
}
#: Records read per pipelined window of ``read_ledgers`` (bounded memory).
READ_BATCH = 5000


@contextmanager
def sessions(
    zk: ZkEndpoint, bookkeeper: BookKeeperEndpoint
) -> Iterator[tuple[MetadataStore, MetadataStore]]:
    """Sessions to Pulsar's metadata (``zk``) and to BookKeeper's (the same one when
    given the same endpoint)."""
    with ExitStack() as stack:
        pulsar = stack.enter_context(MetadataStore.open(zk))
        bk = (
            pulsar
            if bookkeeper.zk is zk
            else stack.enter_context(MetadataStore.open(bookkeeper.zk))
        )
        yield pulsar, bk


class BookKeeperLayoutError(ConfigError):
    """The BookKeeper root has no usable LAYOUT: wrong root or chroot, or another store."""


def parse_layout(text: str, where: str) -> str:
    """The layout a LAYOUT znode names: ``<format version>\\n<factory>:<version>``."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) < 2 or not lines[0].isdigit():
        raise BookKeeperLayoutError(
            f"{where} is not a BookKeeper LAYOUT ({text[:60]!r}); is LEDGERGC_BK_LEDGERS_ROOT "
            "BookKeeper's zkLedgersRootPath?"
        )
    factory = lines[1].rpartition(":")[0] or lines[1]
    factory = factory.removeprefix("dlshade.")  # BookKeeper's shaded class names
    layout = _FACTORIES.get(factory)
    if layout is None:
        raise BookKeeperLayoutError(
            f"{where} names ledger manager {factory}, which ledger-gc does not know; "
            "only the hierarchical, long hierarchical and flat managers are read, and "
            "nothing was scanned or deleted"
        )
    return layout


def read_layout(store: MetadataStore, root: str) -> str | None:
    """The root's layout, or None when it has no LAYOUT znode (no BookKeeper there)."""
    path = f"{root}/{LAYOUT_ZNODE}"
    raw = store.get_many_raw([path])[0]
    if raw is None:
        return None
    try:
        text = raw[0].decode("utf-8")
    except UnicodeDecodeError:
        text = repr(raw[0][:60])
    return parse_layout(text, f"{store.hosts}{path}")


def layout_of(store: MetadataStore, bookkeeper: BookKeeperEndpoint) -> str | None:
    """The layout of BookKeeper's root (``bookkeeper.root``), or None without a LAYOUT
    znode. An address naming a ledger manager
    (``zk+hierarchical://``) that LAYOUT contradicts is refused: the address was meant
    for another BookKeeper, or LAYOUT is not this one's (BookKeeper itself refuses to
    start on such a mismatch); LAYOUT alone decides how ledger znodes are named."""
    layout = read_layout(store, bookkeeper.root)
    named = bookkeeper.manager
    if layout is not None and named is not None and named != layout:
        raise BookKeeperLayoutError(
            f"{bookkeeper.address_given} names "
            f"the {named} ledger manager, but {store.hosts}{bookkeeper.root}/LAYOUT "
            f"names {layout}; point it at this BookKeeper's metadataServiceUri (or use "
            "zk+null:// to follow LAYOUT). Nothing was scanned or deleted"
        )
    return layout


@dataclass
class Listing:
    """Every ledger znode below the root, as ids, and what else was found there."""

    ledger_ids: list[int] = field(default_factory=list)
    not_ledgers: list[str] = field(default_factory=list)  # relative paths, a sample
    not_ledger_count: int = 0

    def odd(self, relative: str) -> None:
        self.not_ledger_count += 1
        if len(self.not_ledgers) < 20:
            self.not_ledgers.append(relative)


def top_directories(store: MetadataStore, root: str, layout: str) -> tuple[list[str], Listing]:
    """The root's ledger directories (the shards of a distributed scan) and, for the flat
    layout, the ledgers themselves."""
    listing = Listing()
    tops: list[str] = []
    for name in sorted(store.children_of_many([root])[0]):
        if ledger_paths.is_special(name):
            continue
        if layout == ledger_paths.FLAT:
            ledger_id = ledger_paths.ledger_id_of(name, layout)
            if ledger_id is None:
                listing.odd(name)
            else:
                listing.ledger_ids.append(ledger_id)
            continue
        if ledger_paths.tree_of_top(name, layout) is None:
            listing.odd(name)
            continue
        tops.append(name)
    return tops, listing


def shard_directories(
    store: MetadataStore, root: str, layout: str, tops: Sequence[str]
) -> tuple[list[str], Listing]:
    """The second-level directories below ``tops`` (``00/0012``, ``000/0000``): the
    shards of a distributed scan, each at most 10,000 ledgers (short tree) or a subtree
    (long tree); what is not a directory there is counted as not a ledger."""
    listing = Listing()
    shards: list[str] = []
    children = store.children_of_many([f"{root}/{top}" for top in tops])
    for top, names in zip(tops, children, strict=True):
        tree = ledger_paths.tree_of_top(top, layout)
        for name in sorted(names):
            if tree is not None and ledger_paths.is_directory_name(name, tree.widths[1]):
                shards.append(f"{top}/{name}")
            else:
                listing.odd(f"{top}/{name}")
    return shards, listing


@dataclass
class Leaf:
    """One leaf directory of a hierarchical layout, as one ``getChildren2`` listed it."""

    directory: str  # below the root, e.g. "00/0012"
    state: DirectoryState
    ledger_ids: Sequence[int]  # sorted (a LeafIds)


@dataclass
class Leaves:
    """Every leaf directory below some shards, and what was not a ledger there."""

    leaves: list[Leaf] = field(default_factory=list)
    odd: Listing = field(default_factory=Listing)

    @property
    def ledger_count(self) -> int:
        return sum(len(leaf.ledger_ids) for leaf in self.leaves)


def list_leaves(store: MetadataStore, root: str, layout: str, starts: Sequence[str]) -> Leaves:
    """Every ledger below some directories of a hierarchical layout (``starts``: the
    shards ``shard_directories`` found, or any directories one or more levels deep),
    level by level with pipelined reads, each leaf directory listed with its stat in
    one ``getChildren2`` (its ``czxid``, ``cversion`` and ``pzxid`` at that moment)."""
    found = Leaves()
    level: list[str] = []
    for start in starts:
        tree = ledger_paths.tree_of_top(start.split("/")[0], layout)
        if tree is None or len(start.split("/")) >= len(tree.widths):
            found.odd.odd(start)
        else:
            level.append(start)
    # Walk the directory levels down to the leaves (the short tree's shards are leaves).
    while True:
        deeper = [rel for rel in level if not _is_leaf(rel, layout)]
        if not deeper:
            break
        leaves_now = [rel for rel in level if _is_leaf(rel, layout)]
        children = store.children_of_many([f"{root}/{rel}" for rel in deeper])
        level = leaves_now
        for rel, names in zip(deeper, children, strict=True):
            tree = ledger_paths.tree_of_top(rel.split("/")[0], layout)
            assert tree is not None
            width = tree.widths[len(rel.split("/"))]
            for name in sorted(names):
                if ledger_paths.is_directory_name(name, width):
                    level.append(f"{rel}/{name}")
                else:
                    found.odd.odd(f"{rel}/{name}")
    level.sort()
    # A few leaves' names at a time (up to 10,000 each, 60 bytes a name): all of them
    # at once were the driver's peak, 60 MB a million ledgers before any became an id.
    for batch in _leaf_batches(store, root, level):
        answers = store.children_with_stats([f"{root}/{rel}" for rel in batch])
        for rel, got in zip(batch, answers, strict=True):
            if got is None:
                continue  # removed since its parent was listed: it has no ledgers now
            names, stat = got
            ids, odd = ledger_paths.leaf_ledger_ids(rel, names, layout)
            for name in odd:
                found.odd.odd(f"{rel}/{name}")
            ids.sort()
            state = DirectoryState(int(stat.czxid), int(stat.cversion), int(stat.pzxid))
            # (2 bytes an id from the leaf's first: a list of ints is 36, an array 8,
            # and the driver holds every leaf's for the whole survey)
            found.leaves.append(Leaf(rel, state, LeafIds.of(ids)))
    return found


#: Ledger names the listing has in flight, at most (but a leaf's; ``list_leaves``): a
#: batch is as many leaf directories as hold so many by their stats, read first (a
#: read a leaf: 1,000 at 10M ledgers). Sixteen dense leaves at once, 160,000 names,
#: were 18 MiB of the driver's peak at 1M ledgers (129 MiB against 111 with four).
LEAF_NAMES_AT_ONCE = 20_000
#: Leaf directories listed in one pipelined batch, at most (sparse leaves).
LEAF_BATCH = 64
#: Leaf directories whose stats are read at once (to size the batches).
_STATS_AT_ONCE = 1_000


def _leaf_batches(store: MetadataStore, root: str, level: list[str]) -> Iterator[list[str]]:
    """The leaf directories, in order, in batches of about ``LEAF_NAMES_AT_ONCE`` names
    by each one's ``numChildren`` (a leaf's size as its stat says, a moment before its
    listing: a guess, but bounded; sized by the leaves listed before, a batch after
    sparse leaves held sixteen dense ones). A leaf removed since is of no size."""
    batch: list[str] = []
    names = 0
    for chunk in batches(level, _STATS_AT_ONCE):
        stats = store.get_many([f"{root}/{rel}" for rel in chunk])
        for rel, got in zip(chunk, stats, strict=True):
            size = 0 if got is None else int(got[1].numChildren)
            if batch and (names + size > LEAF_NAMES_AT_ONCE or len(batch) >= LEAF_BATCH):
                yield batch
                batch, names = [], 0
            batch.append(rel)
            names += size
    if batch:
        yield batch


def _is_leaf(relative: str, layout: str) -> bool:
    """Whether a directory below the root holds ledgers (its tree's last level)."""
    parts = relative.split("/")
    tree = ledger_paths.tree_of_top(parts[0], layout)
    return tree is not None and len(parts) == len(tree.widths) - 1


def read_raw(
    store: MetadataStore, root: str, layout: str, ledger_ids: Sequence[int]
) -> Iterator[tuple[int, bytes, Any]]:
    """Each ledger's znode: (id, data, ZnodeStat), pipelined; a znode deleted since the
    listing is left out (a ledger Pulsar deleted meanwhile)."""
    for offset in range(0, len(ledger_ids), READ_BATCH):
        batch = ledger_ids[offset : offset + READ_BATCH]
        znodes = [ledger_paths.ledger_path(root, lid, layout) for lid in batch]
        for ledger_id, got in zip(batch, store.get_many(znodes), strict=True):
            if got is not None:
                yield ledger_id, got[0], got[1]


def read_ledgers(
    store: MetadataStore, root: str, layout: str, ledger_ids: Sequence[int]
) -> Iterator[BkLedger]:
    """Each ledger's record, decoded (an undecodable one carries its error)."""
    for ledger_id, data, stat in read_raw(store, root, layout, ledger_ids):
        yield ledger_of(ledger_id, data, stat.version, int(stat.ctime))


class RecordInputs(Protocol):
    """What the classification reads of a ledger's decoded record (``LedgerRecord``);
    the record cache keeps the same (``CachedRecord``, its ``custom`` as ``PulsarTags``)."""

    @property
    def state(self) -> str: ...
    @property
    def length(self) -> int: ...
    @property
    def format_version(self) -> int: ...
    @property
    def ctime_ms(self) -> int | None: ...
    @property
    def custom(self) -> Mapping[str, bytes]: ...


def ledger_of(ledger_id: int, data: bytes, version: int, znode_ctime_ms: int) -> BkLedger:
    """One ledger from its znode's data and stat (``ledger_of_record``); a record that
    does not decode gives a ledger that carries its error."""
    return decoded(ledger_id, data, version, znode_ctime_ms)[0]


def decoded(
    ledger_id: int, data: bytes, version: int, znode_ctime_ms: int
) -> tuple[BkLedger, LedgerRecord | None]:
    """``ledger_of``, and the decoded record (None: it did not decode)."""
    try:
        record = decode_record(data)
    except RecordError as exc:
        return BkLedger(ledger_id, version, znode_ctime_ms, error=str(exc)), None
    return ledger_of_record(ledger_id, version, znode_ctime_ms, record), record


_TAGS: dict[tuple[tuple[str, bytes], ...], PulsarTags] = {}
#: Distinct custom-metadata maps remembered (a topic's ledgers all carry the same).
_TAGS_KEPT = 4096


def tags_of(custom: Mapping[str, bytes]) -> PulsarTags:
    """``PulsarTags.of(custom)``, remembered: a survey decodes the same few maps a
    million times."""
    key = tuple(custom.items())
    tags = _TAGS.get(key)
    if tags is None:
        if len(_TAGS) >= _TAGS_KEPT:
            _TAGS.clear()
        tags = _TAGS[key] = PulsarTags.of(custom)
    return tags


def ledger_of_record(
    ledger_id: int,
    version: int,
    znode_ctime_ms: int,
    record: RecordInputs,
    tags: PulsarTags | None = None,
) -> BkLedger:
    """One ledger from its decoded record (read now, or the record cache's) and its
    znode's version and ctime; ``tags``: ``PulsarTags.of(record.custom)``, if known.

    Its age counts from the later of the znode's ctime (ZooKeeper's clock, when the
    bookie client created it) and the record's ctime (the creating broker's clock): a
    broker clock days behind must not make a ledger ZooKeeper created seconds ago look
    old, and neither clock alone may make a ledger older than it is."""
    return ledger_of_fields(
        ledger_id,
        version,
        znode_ctime_ms,
        record.state,
        record.length,
        record.format_version,
        record.ctime_ms,
        tags_of(record.custom) if tags is None else tags,
    )


def ledger_of_fields(
    ledger_id: int,
    version: int,
    znode_ctime_ms: int,
    state: str,
    length: int,
    format_version: int,
    record_ctime_ms: int | None,
    tags: PulsarTags,
) -> BkLedger:
    """``ledger_of_record`` from the record's fields one by one (the record cache's
    columns): the one place a ledger's age is decided (see there)."""
    # (Positional: a survey builds a million.)
    return BkLedger(
        ledger_id,
        version,
        max(record_ctime_ms or 0, znode_ctime_ms),
        state,
        length,
        format_version,
        tags,
    )
