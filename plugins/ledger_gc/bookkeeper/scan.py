"""BookKeeper's ledger metadata, listed and read from ZooKeeper.

``read_layout`` reads ``<root>/LAYOUT`` (which ledger manager names the znodes);
``list_ledgers`` walks the tree level by level with pipelined ``get_children``;
``read_ledgers`` reads the records, pipelined, and decodes each (``records``).

The listing fails closed: a lost session raises, never returns fewer ledgers. A znode
that vanishes between the listing and the read was deleted meanwhile (a ledger deleted
by Pulsar) and is simply absent. A znode in the tree whose name is not a ledger's is
counted (``Listing.not_ledgers``), never read as one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from ledger_gc.errors import ConfigError
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.bookkeeper import ledger_paths
from ledger_gc.rules.bookkeeper.classify import BkLedger, PulsarTags
from ledger_gc.rules.bookkeeper.records import RecordError, decode_record
from ledger_gc.settings import Settings

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
def sessions(settings: Settings) -> Iterator[tuple[MetadataStore, MetadataStore]]:
    """Sessions to Pulsar's metadata and to BookKeeper's (the same one when they share
    an ensemble and chroot)."""
    with ExitStack() as stack:
        pulsar = stack.enter_context(MetadataStore.open(settings))
        bk_settings = settings.bookkeeper_settings()
        bk = (
            pulsar
            if bk_settings is settings
            else stack.enter_context(MetadataStore.open(bk_settings))
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


def layout_of(store: MetadataStore, settings: Settings) -> str | None:
    """The layout of BookKeeper's root as the settings name it (``bookkeeper_root``), or
    None without a LAYOUT znode. An address naming a ledger manager
    (``zk+hierarchical://``) that LAYOUT contradicts is refused: the address was meant
    for another BookKeeper, or LAYOUT is not this one's (BookKeeper itself refuses to
    start on such a mismatch); LAYOUT alone decides how ledger znodes are named."""
    layout = read_layout(store, settings.bookkeeper_root)
    named = settings.bookkeeper_manager
    if layout is not None and named is not None and named != layout:
        raise BookKeeperLayoutError(
            f"{settings.bookkeeper_env}={settings.given(settings.bookkeeper_env)!r} names "
            f"the {named} ledger manager, but {store.hosts}{settings.bookkeeper_root}/LAYOUT "
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


def list_tree(store: MetadataStore, root: str, layout: str, starts: Sequence[str]) -> Listing:
    """Every ledger below some directories of a hierarchical layout (the top ones, or
    the shards ``shard_directories`` found): the driver's listing."""
    return list_subtrees(store, root, layout, starts)


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


def list_subtrees(store: MetadataStore, root: str, layout: str, starts: Sequence[str]) -> Listing:
    """Every ledger below some directories of a hierarchical layout (``starts``: paths
    below the root, one or more levels deep), level by level with pipelined reads."""
    listing = Listing()
    for start in starts:
        parts = start.split("/")
        tree = ledger_paths.tree_of_top(parts[0], layout)
        if tree is None or len(parts) >= len(tree.widths):
            listing.odd(start)
            continue
        level = [start]
        for width in tree.widths[len(parts) : -1]:
            children = store.children_of_many([f"{root}/{rel}" for rel in level])
            nxt = []
            for rel, names in zip(level, children, strict=True):
                for name in sorted(names):
                    if ledger_paths.is_directory_name(name, width):
                        nxt.append(f"{rel}/{name}")
                    else:
                        listing.odd(f"{rel}/{name}")
            level = nxt
        children = store.children_of_many([f"{root}/{rel}" for rel in level])
        for rel, names in zip(level, children, strict=True):
            for name in names:
                ledger_id = ledger_paths.ledger_id_of(f"{rel}/{name}", layout)
                if ledger_id is None:
                    listing.odd(f"{rel}/{name}")
                else:
                    listing.ledger_ids.append(ledger_id)
    listing.ledger_ids.sort()
    return listing


def read_ledgers(
    store: MetadataStore, root: str, layout: str, ledger_ids: Sequence[int]
) -> Iterator[BkLedger]:
    """Each ledger's record, decoded (an undecodable one carries its error)."""
    for offset in range(0, len(ledger_ids), READ_BATCH):
        batch = ledger_ids[offset : offset + READ_BATCH]
        znodes = [ledger_paths.ledger_path(root, lid, layout) for lid in batch]
        for ledger_id, got in zip(batch, store.get_many(znodes), strict=True):
            if got is None:
                continue  # deleted since the listing
            yield ledger_of(ledger_id, got[0], got[1].version, int(got[1].ctime))


def ledger_of(ledger_id: int, data: bytes, version: int, znode_ctime_ms: int) -> BkLedger:
    """One ledger from its znode's data and stat.

    Its age counts from the later of the znode's ctime (ZooKeeper's clock, when the
    bookie client created it) and the record's ctime (the creating broker's clock): a
    broker clock days behind must not make a ledger ZooKeeper created seconds ago look
    old, and neither clock alone may make a ledger older than it is."""
    try:
        record = decode_record(data)
    except RecordError as exc:
        return BkLedger(ledger_id, version, znode_ctime_ms, error=str(exc))
    return BkLedger(
        ledger_id,
        version,
        max(record.ctime_ms or 0, znode_ctime_ms),
        state=record.state,
        length=record.length,
        format_version=record.format_version,
        tags=PulsarTags.of(record.custom),
    )
