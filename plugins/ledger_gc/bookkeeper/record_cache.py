"""The BookKeeper record cache: CLOSED ledgers' records kept between cycles, so that a
cycle costs ZooKeeper about what changed since the last one (DESIGN.md "Cost to
ZooKeeper"; the rules are ``rules/bookkeeper/record_cache.py``).

Kept in the state store (every worker shares it; PostgreSQL in a deployment), one row
per leaf directory of ledger znodes (``state.schema.bk_records``), keyed by the
BookKeeper's ``<root>/INSTANCEID`` and where it was read (``location``: its ensemble,
chroot, root and layout), and one row per BookKeeper with its cycles since the last
full read (``bk_record_cycles``). What a cycle decides here (``plan``):

* the cache is used only when ``LEDGERGC_BK_RECORD_CACHE`` is on, the root has an
  ``INSTANCEID`` (without one a cache cannot tell this BookKeeper from another), the
  rows are of this version's format, BookKeeper's id counters (``<root>/idgen``,
  ``idgen-long``) were not reset since (created again, or counting from lower),
  ZooKeeper's history did not go back since (``history_went_back``), and the last full
  read is fewer than ``LEDGERGC_BK_FULL_READ_EVERY`` cycles ago; otherwise every ledger
  is read, and the rows are written afresh;
* ``cversion`` counts creates and deletes on the server this session is on
  (``probe_cversion``: one child of ledger-gc's own created and deleted, under
  ``/ledger-gc`` in BookKeeper's chroot); a session that lost its connection during the
  listing may have moved to another server, and proves nothing (``ConnectionWatch``).

Nothing here is read by the live re-check before a delete (``deleting.py``), which
reads the znode itself.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from ledger_gc.config.endpoints import BookKeeperEndpoint, Endpoints, StateEndpoint
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.bookkeeper import ledger_paths
from ledger_gc.rules.bookkeeper.record_cache import (
    CACHE_FORMAT,
    BodyError,
    CountersError,
    DirectoryRow,
    DirectoryState,
    decode_counters,
    decode_ids,
    encode_ids,
)
from ledger_gc.state import schema
from ledger_gc.state.batching import batches
from ledger_gc.state.stores import open_store

log = logging.getLogger(__name__)

INSTANCE_ID_ZNODE = "INSTANCEID"
#: BookKeeper's id generators below the root (``ZkLedgerIdGenerator``,
#: ``LongZkLedgerIdGenerator``): each id drawn is a sequential child of one of them.
ID_COUNTERS = ("idgen", "idgen-long")
#: Where ``probe_cversion`` creates and deletes its child (BookKeeper's chroot).
PROBE_PARENT = "/ledger-gc/cversion-probe"
#: The probe parent's stat after the last cycle's probe, beside the id counters' (JSON).
HISTORY_KEY = "#probe"
DAY_MS = 86_400_000
#: Rows written per statement: a row carries its directory's packed records (about
#: 120 KB for 10,000 ledgers), held until its statement runs, beside the part being
#: merged: eight are a megabyte (fifty were six, at the driver's peak at 10M).
_ROWS_PER_INSERT = 8


def location_of(bookkeeper: BookKeeperEndpoint, layout: str) -> str:
    """Where a BookKeeper's records were read: its servers (sorted: the same ensemble
    however the connect string lists them), chroot, ledgers root and layout."""
    hosts, slash, chroot = bookkeeper.hosts.partition("/")
    servers = ",".join(sorted(h.strip() for h in hosts.split(",") if h.strip()))
    return f"{servers}{slash}{chroot}|{bookkeeper.root}|{layout}"


@dataclass(frozen=True)
class Identity:
    """Which BookKeeper this is, as its root says now."""

    instance_id: str | None
    # counter name -> [its znode's czxid, its cversion]; absent: no such counter
    id_counters: dict[str, list[int]]
    # PROBE_PARENT's [czxid, cversion] before this cycle's probe; None: it is absent
    probe: list[int] | None = None


def read_identity(bk: MetadataStore, root: str) -> Identity:
    """``<root>/INSTANCEID``, the id counters' stats and the probe parent's (four reads;
    the probe parent's by ``exists``, which no ACL refuses)."""
    names = [INSTANCE_ID_ZNODE, *ID_COUNTERS]
    got = bk.get_many([f"{root}/{name}" for name in names])
    bk.reading(1)
    try:
        probe = bk.client.exists(PROBE_PARENT)
    except KazooException:
        probe = None  # not known: as if gone (a full read, if the last cycle left a mark)
    instance = None
    if got[0] is not None:
        text = bytes(got[0][0]).decode("utf-8", "replace").strip()
        instance = text or None
    counters = {
        name: [int(answer[1].czxid), int(answer[1].cversion)]
        for name, answer in zip(ID_COUNTERS, got[1:], strict=True)
        if answer is not None
    }
    return Identity(instance, counters, None if probe is None else _mark(probe))


def _mark(stat: Any) -> list[int]:
    return [int(stat.czxid), int(stat.cversion)]


def history_went_back(before: list[int] | None, now: list[int] | None) -> str | None:
    """Why ZooKeeper's history looks rolled back since the last cycle (None: it does not).

    ZooKeeper restored from a backup loses the ledgers created since, and BookKeeper
    hands their ids out again; once the new history has created as many znodes, the id
    counters and every directory's ``cversion`` and ``pzxid`` stand where the lost
    history left them, and a reused id's new znode passes for the cached one. Only
    ledger-gc changes its probe parent (two per probe, after each cycle's listing): a
    restore from before a cycle's listing leaves it lower than that cycle saw it, or
    gone, until ledger-gc itself probes again."""
    if before is None:
        return None
    if now is None:
        return f"{PROBE_PARENT} is gone"
    if now[0] != before[0]:
        return f"{PROBE_PARENT} was created again"
    if now[1] < before[1]:
        return f"{PROBE_PARENT} counts lower than the last cycle left it"
    return None


def counters_reset(before: Mapping[str, list[int]], now: Mapping[str, list[int]]) -> str | None:
    """Why BookKeeper's id counters look reset since ``before`` (None: they do not): a
    counter gone, created again, or counting from lower would hand out ids again."""
    for name, (czxid, cversion) in before.items():
        current = now.get(name)
        if current is None:
            return f"its id counter {name} is gone"
        if current[0] != czxid:
            return f"its id counter {name} was created again"
        if current[1] < cversion:
            return f"its id counter {name} counts from lower than before"
    return None


class ConnectionWatch:
    """Whether a session kept its connection (and so its server) over a stretch."""

    def __init__(self) -> None:
        self.moved = False

    def __call__(self, state: KazooState) -> None:
        if state != KazooState.CONNECTED:
            self.moved = True


@contextmanager
def watching(bk: MetadataStore) -> Iterator[ConnectionWatch]:
    watch = ConnectionWatch()
    bk.client.add_listener(watch)
    try:
        yield watch
    finally:
        bk.client.remove_listener(watch)


@dataclass(frozen=True)
class Probe:
    """What ``probe_cversion`` showed: the probe parent's mark, or why there is none."""

    mark: list[int] | None
    why: str | None = None  # why the probe proves nothing (None: it proved it)


#: What the cache cannot do without the probe's proof (the report's ``cannot``).
UNPROVEN = (
    "the record cache reuses only directories with no change at all (a directory where "
    "a ledger was created or deleted is read whole again)"
)


def probe_cversion(bk: MetadataStore) -> Probe:
    """Whether the server this session is on counts a child's delete in its parent's
    ``cversion`` as ZooKeeper documents ("the number of changes to the children"): an
    ephemeral child of our own is created and deleted, and the parent's ``cversion``
    must move by exactly two. If so, the parent's ``[czxid, cversion]`` after it (the
    mark ``history_went_back`` compares next cycle); no mark, with why, when it cannot
    be shown (no CREATE/DELETE at ``PROBE_PARENT``, another probe at the same time): the
    cache then reuses only directories with no change."""
    client = bk.client
    child = f"{PROBE_PARENT}/{uuid.uuid4().hex}"
    try:
        bk.reading(2)
        client.ensure_path(PROBE_PARENT)
        before = client.exists(PROBE_PARENT)
        client.create(child, b"", ephemeral=True)
        client.delete(child)
        bk.reading(1)
        after = client.exists(PROBE_PARENT)
    except KazooException as exc:
        why = (
            f"ZooKeeper refused ledger-gc's probe at {PROBE_PARENT} in BookKeeper's "
            f"chroot ({type(exc).__name__}): the identity needs CREATE and DELETE there to "
            "show how ZooKeeper counts child changes; until then " + UNPROVEN
        )
        log.warning("%s (at %s)", why, bk.hosts)
        return Probe(None, why)
    if before is None or after is None:
        return Probe(None, f"{PROBE_PARENT} was deleted during the probe; " + UNPROVEN)
    if after.cversion - before.cversion == 2 and after.numChildren == before.numChildren:
        return Probe(_mark(after))
    return Probe(
        None,
        f"{PROBE_PARENT}'s cversion did not move by exactly the probe's create and delete "
        "(another probe at the same time?); " + UNPROVEN,
    )


@dataclass
class CachedDirectory:
    """A directory's row: what the rules compare, and its packed records."""

    row: DirectoryRow
    body: bytes


@dataclass(frozen=True)
class RowStat:
    """What the plan keeps of a directory's row: its stat when listed, not its ids or
    records (those are loaded a task's directories at a time: ``load_rows``)."""

    state: DirectoryState
    proven: bool
    ledgers: int = 0  # listed in it then


@dataclass
class CachePlan:
    """What this cycle does with the record cache, and why."""

    enabled: bool  # LEDGERGC_BK_RECORD_CACHE, and an INSTANCEID to key it by
    full: bool  # every ledger is read this cycle
    why: str
    instance_id: str | None = None
    location: str = ""
    identity: Identity | None = None
    layout: str = ""
    cycles_since_full: int = 0  # before this cycle
    high: int | None = None  # the previous cycle's highest listed id
    full_read_ms: int = 0
    # The rows there are, by directory (their records stay in the store until a part
    # of the survey needs them: ``load_rows``).
    rows: dict[str, RowStat] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "full_read": self.full,
            "why": self.why,
            "instance_id": self.instance_id,
            "cycles_since_full_read": self.cycles_since_full,
        }


def plan(endpoints: Endpoints, bk: MetadataStore, layout: str) -> CachePlan:
    """Decide whether this cycle reads every ledger, and load the rows it may reuse."""
    bookkeeper, policy = endpoints.bookkeeper, endpoints.policy
    if not policy.bk_record_cache:
        return CachePlan(False, True, "LEDGERGC_BK_RECORD_CACHE=false: every ledger is read")
    if layout == ledger_paths.FLAT:
        return CachePlan(False, True, "the flat layout has no ledger directories to check")
    root = bookkeeper.root
    identity = read_identity(bk, root)
    if identity.instance_id is None:
        return CachePlan(
            False,
            True,
            f"{root}/{INSTANCE_ID_ZNODE} does not exist: a cache could not tell this "
            "BookKeeper from another; every ledger is read",
        )
    location = location_of(bookkeeper, layout)
    base = CachePlan(True, True, "", identity.instance_id, location, identity, layout)
    store = open_store(endpoints.state)
    with store.read() as conn:
        cycles = conn.execute(
            schema.bk_record_cycles.select().where(
                schema.bk_record_cycles.c.instance_id == identity.instance_id,
                schema.bk_record_cycles.c.location == location,
            )
        ).first()
    if cycles is None:
        base.why = "the first cycle with the record cache here: every ledger is read"
        return base
    base.cycles_since_full = int(cycles.cycles_since_full)
    base.full_read_ms = int(cycles.full_read_ms)
    base.high = None if cycles.high_ledger_id is None else int(cycles.high_ledger_id)
    if cycles.format != CACHE_FORMAT:
        base.why = f"the cache's rows are of format {cycles.format}: every ledger is read"
        return base
    try:
        counters, last_probe = decode_counters(cycles.id_counters, HISTORY_KEY)
    except CountersError as exc:
        log.warning(
            "the record cache's ledgergc_bk_record_cycles row for %s does not decode (its "
            "id_counters: %s): every ledger is read and the row is written again",
            identity.instance_id,
            exc,
        )
        base.why = (
            f"the cache's ledgergc_bk_record_cycles row does not decode ({exc}): every "
            "ledger is read, the row is written again"
        )
        return base
    went_back = history_went_back(last_probe, identity.probe)
    if went_back is not None:
        base.why = (
            f"ZooKeeper's history went back ({went_back}: restored from a backup?): every "
            "ledger is read, the cache starts again"
        )
        return base
    reset = counters_reset(counters, identity.id_counters)
    if reset is not None:
        base.why = f"BookKeeper's {reset}: every ledger is read, the cache starts again"
        return base
    every = policy.bk_full_read_every
    if base.cycles_since_full + 1 >= every:
        base.why = (
            f"a full read every {every} cycle(s) (LEDGERGC_BK_FULL_READ_EVERY): every "
            "ledger is read, the cache starts again"
        )
        return base
    base.full = False
    base.why = "records of CLOSED ledgers read by earlier cycles are reused where they stand"
    base.rows = _row_stats(endpoints.state, identity.instance_id, location)
    return base


def _row_stats(state_store: StateEndpoint, instance_id: str, location: str) -> dict[str, RowStat]:
    table = schema.bk_records
    columns = (
        table.c.directory,
        table.c.dir_czxid,
        table.c.dir_cversion,
        table.c.dir_pzxid,
        table.c.cversion_proven,
        table.c.ledgers,
    )
    with open_store(state_store).read() as conn:
        rows = conn.execute(
            sa.select(*columns).where(
                table.c.instance_id == instance_id, table.c.location == location
            )
        ).all()
    return {
        directory: RowStat(
            DirectoryState(int(czxid), int(cversion), int(pzxid)), bool(proven), int(ledgers)
        )
        for directory, czxid, cversion, pzxid, proven, ledgers in rows
    }


def load_rows(
    state_store: StateEndpoint, cache: CachePlan, directories: Iterable[str]
) -> dict[str, CachedDirectory]:
    """The rows (ids listed and packed records) of these directories, those the cache
    has: a part's, while the survey packs it, never every directory's at once (at 10M
    ledgers, 120 MiB of records and 80 MiB of ids)."""
    keys = sorted({_first_id(d, cache.layout) for d in directories if d in cache.rows})
    table = schema.bk_records
    found: dict[str, CachedDirectory] = {}
    if not keys or cache.instance_id is None:
        return found
    mine = (table.c.instance_id == cache.instance_id) & (table.c.location == cache.location)
    with open_store(state_store).read() as conn:
        for batch in batches(keys, 500):
            for row in conn.execute(
                table.select().where(mine & table.c.first_ledger_id.in_(batch))
            ):
                try:
                    listed = decode_ids(bytes(row.listed))
                except BodyError as exc:
                    log.warning(
                        "record cache row %s does not decode (%s): read again", row.directory, exc
                    )
                    continue
                state = DirectoryState(
                    int(row.dir_czxid), int(row.dir_cversion), int(row.dir_pzxid)
                )
                directory_row = DirectoryRow(
                    row.directory, state, bool(row.cversion_proven), listed
                )
                found[row.directory] = CachedDirectory(directory_row, bytes(row.body))
    return found


@dataclass(frozen=True)
class NewRow:
    """One leaf directory as this cycle listed it, with its packed records."""

    directory: str
    state: DirectoryState
    listed: Sequence[int]
    records: int
    # Its packed records; None: its row stands as it is (the same records and stat),
    # and is not written.
    body: bytes | None


def save(
    state: StateEndpoint,
    cache: CachePlan,
    directories: Sequence[str],
    rows: Iterable[NewRow],
    *,
    proven: bool,
    high: int | None,
    now_ms: int,
    probe: list[int] | None = None,
    keep_days: int = 30,
) -> None:
    """Write this cycle's rows and cycle count in one transaction: ``directories``, every
    directory with a row this cycle (rows of others leave), and ``rows``, those written
    anew (read as they come, a batch at a time: the survey's parts arrive with them).
    ``probe``: the probe parent's mark after this cycle's listing (``probe_cversion``).
    Rows of any other BookKeeper or location that no cycle used for ``keep_days`` days
    go too (``drop_unused``). Nothing is written unless every row is."""
    if not cache.enabled or cache.instance_id is None or cache.identity is None:
        for _ in rows:  # (read to the end all the same: what comes with them counts)
            pass
        return
    table, cycles = schema.bk_records, schema.bk_record_cycles
    mine = (table.c.instance_id == cache.instance_id) & (table.c.location == cache.location)
    keys = {_first_id(d, cache.layout) for d in directories}
    with open_store(state).write() as conn:
        existing = {
            int(k)
            for (k,) in conn.execute(
                table.select().with_only_columns(table.c.first_ledger_id).where(mine)
            )
        }
        for gone in batches(sorted(existing - keys), 500):
            conn.execute(table.delete().where(mine & table.c.first_ledger_id.in_(gone)))
        written = 0
        for batch in batches(rows, _ROWS_PER_INSERT):
            values = [_row_values(cache, r, proven, now_ms) for r in batch]
            renew = [v["first_ledger_id"] for v in values if v["first_ledger_id"] in existing]
            if renew:
                conn.execute(table.delete().where(mine & table.c.first_ledger_id.in_(renew)))
            conn.execute(table.insert(), values)
            written += len(values)
        if cache.full and written < len(keys):
            raise ValueError("a full read left directories without their records")
        conn.execute(
            cycles.delete().where(
                (cycles.c.instance_id == cache.instance_id) & (cycles.c.location == cache.location)
            )
        )
        drop_unused(conn, now_ms, keep_days, (cache.instance_id, cache.location))
        conn.execute(
            cycles.insert().values(
                instance_id=cache.instance_id,
                location=cache.location,
                format=CACHE_FORMAT,
                cycles_since_full=0 if cache.full else cache.cycles_since_full + 1,
                high_ledger_id=high,
                id_counters=json.dumps(
                    cache.identity.id_counters | ({HISTORY_KEY: probe} if probe else {}),
                    sort_keys=True,
                ),
                updated_ms=now_ms,
                full_read_ms=now_ms if cache.full else cache.full_read_ms,
            )
        )


def _row_values(cache: CachePlan, row: NewRow, proven: bool, now_ms: int) -> dict[str, Any]:
    return {
        "instance_id": cache.instance_id,
        "location": cache.location,
        "first_ledger_id": _first_id(row.directory, cache.layout),
        "directory": row.directory,
        "dir_czxid": row.state.czxid,
        "dir_cversion": row.state.cversion,
        "dir_pzxid": row.state.pzxid,
        "cversion_proven": proven,
        "listed_ms": now_ms,
        "ledgers": len(row.listed),
        "records": row.records,
        "listed": encode_ids(row.listed),
        "body": row.body,
    }


def drop_unused(conn: Any, now_ms: int, keep_days: int, mine: tuple[str, str]) -> int:
    """Drop the rows of every BookKeeper and location (but ``mine``, this cycle's) that
    no cycle used for ``keep_days`` days (``LEDGERGC_BK_RECORD_CACHE_KEEP_DAYS``): a
    state store outlives clusters and addresses, and their rows would stay for good. A
    cycle row's ``updated_ms`` is when a cycle last used it; directory rows without a
    cycle row go when listed before then.
    Returns how many (instance, location) pairs were dropped."""
    before_ms = now_ms - keep_days * DAY_MS
    table, cycles = schema.bk_records, schema.bk_record_cycles
    used = {
        (r.instance_id, r.location): int(r.updated_ms)
        for r in conn.execute(
            cycles.select().with_only_columns(
                cycles.c.instance_id, cycles.c.location, cycles.c.updated_ms
            )
        )
    }
    listed = conn.execute(
        table.select()
        .with_only_columns(table.c.instance_id, table.c.location, sa.func.max(table.c.listed_ms))
        .group_by(table.c.instance_id, table.c.location)
    ).all()
    last = {(i, loc): int(ms) for i, loc, ms in listed}
    for key, ms in used.items():
        last[key] = ms  # a cycle row says when it was last used
    stale = sorted(key for key, ms in last.items() if ms < before_ms and key != mine)
    for instance_id, location in stale:
        for t in (table, cycles):
            conn.execute(
                t.delete().where((t.c.instance_id == instance_id) & (t.c.location == location))
            )
        log.info(
            "dropped the record cache's rows of %s at %s: no cycle used them for %d days "
            "(LEDGERGC_BK_RECORD_CACHE_KEEP_DAYS=%d)",
            instance_id,
            location,
            (now_ms - last[(instance_id, location)]) // DAY_MS,
            keep_days,
        )
    return len(stale)


def _first_id(directory: str, layout: str) -> int:
    """The lowest ledger id whose znode is in ``directory`` (its row's key). Not simply
    its digits: in the hierarchical layout the first long directory
    (``000/0000/0021/4748``) spans the same numbers as the last short one (``21/4748``),
    and holds only the ids from 2^31-1 on (a cluster whose ids crossed it has both).
    Unique among rows: only directories that list a ledger have one (``_save_cache``),
    and two such directories hold disjoint ids."""
    first = int("".join(directory.split("/"))) * ledger_paths.LEAF_SPAN
    long_tree = len(directory.split("/")) == len(ledger_paths.LONG_TREE.widths) - 1
    if layout == ledger_paths.HIERARCHICAL and long_tree:
        first = max(first, ledger_paths.SHORT_ID_LIMIT)
    return first
