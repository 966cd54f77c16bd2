"""The BookKeeper source's survey: references, then listing, then classification.

Order matters (``classify``): Pulsar's records are read first, then BookKeeper's
ledgers are listed and read, then the id counter of Pulsar's chroot. The result is what
the cycle's diff records for this source: totals per class and namespace, the orphan
candidates (one per ledger, keyed ``bookkeeper:<znode>``), a sample of held, foreign and
unreadable ledgers, and the evidence the guards judge (``guards.bookkeeper_refusals``):

* ``missing_listed``: ledgers a managed ledger still lists (read again, live, after the
  listing, so a trim or a topic deletion in between is not counted) that this BookKeeper
  root does not have: the root is another cluster's, or a copy;
* ``above_counter``: Pulsar ledgers whose ids are at or above the id counter of Pulsar's
  chroot, read after the listing: the Pulsar metadata read is older than the ledgers;
* ``pulsar_ledgers`` beside ``managed_ledgers``: Pulsar's ledgers beside no topic at all.

``bk_missing`` (report-only, never registered): every ledger a managed ledger lists (not
offloaded with ``bookkeeperDeleted``), a cursor's ``cursorsLedgerId`` or a schema index
names that BookKeeper does not have, read again live like ``missing_listed``: that topic
cannot be read (Pulsar's "No such ledger"). Its count and samples name the topic, the
ledger and the znode that names it.

Ledger ids the Pulsar-metadata source handed off (``state.handoff``: a record it removed
named them) are read before the listing and classed by ``classify``'s rules for them;
those this BookKeeper no longer has are forgotten after the survey, unless a guard of
the root (``guards.bookkeeper_refusals``) trips: a wrong root has none of them. The
namespaces that source removed (``state.handoff.removed_namespaces``) are read with them:
their ledgers are this cluster's, not held as an unknown namespace's (``classify``).
"""

from __future__ import annotations

import copy
import logging
import pickle
import time
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

from ledger_gc.bookkeeper import offloaded_copy, record_cache, references, scan
from ledger_gc.bookkeeper.candidate_table import BkCandidate, CandidateTable
from ledger_gc.bookkeeper.cost import SurveyCost
from ledger_gc.bookkeeper.directories import (
    DirectoryDone,
    DirectoryWork,
    classify_directories,
    split_works,
)
from ledger_gc.clock import now_ms
from ledger_gc.config.endpoints import BookKeeperEndpoint, Endpoints, StateEndpoint, ZkEndpoint
from ledger_gc.errors import ConfigError
from ledger_gc.formats.records import decode_managed_cursor_info, decode_managed_ledger_info
from ledger_gc.memory import release_freed
from ledger_gc.metadata import read_budget
from ledger_gc.metadata.config_store import configuration_store
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.bookkeeper import classify, ledger_paths, records
from ledger_gc.rules.bookkeeper.classify import (
    BK_CLASSES,
    BK_ORPHAN_CLASSES,
    TARGET_SCHEME,
    BkLedger,
    Verdict,
    ledger_id_of_target,
    znode_of_target,
)
from ledger_gc.rules.bookkeeper.ledger_index import FoundIds
from ledger_gc.rules.bookkeeper.record_cache import DirectoryState, reusable
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.orphans import guards
from ledger_gc.state import handoff

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

MAX_SAMPLES = 50
#: ``SurveyRequest.shared`` keys the Pulsar-metadata survey fills before this one runs.
SHARED_REFERENCES = "pulsar_references"
SHARED_LEFTOVER_LEDGERS = "leftover_ledgers"
#: ... and the S3 source's survey with nothing to scan (``survey_steps.without_buckets``):
#: ``/managed-ledgers`` as it listed it to count the managed ledgers (a
#: ``ManagedLedgerTree``), which the references' read of this cycle uses instead of
#: listing it again.
SHARED_MANAGED_LEDGERS = "managed_ledger_tree"
#: Classes counted without samples (live ledgers, and the orphans: their candidates).
_COUNTED_ONLY = frozenset((classify.BK_LIVE, *BK_ORPHAN_CLASSES))


@dataclass
class Totals:
    ledgers: int = 0
    bytes: int = 0

    def add(self, size: int) -> None:
        self.ledgers += 1
        self.bytes += size

    def to_dict(self) -> dict[str, int]:
        return {"ledgers": self.ledgers, "bytes": self.bytes}


@dataclass
class BookKeeperSurvey:
    """What one survey of the BookKeeper source found."""

    hosts: str
    root: str
    layout: str
    managed_ledgers: int = 0
    ledgers: int = 0
    bytes: int = 0
    pulsar_ledgers: int = 0
    classes: dict[str, Totals] = field(default_factory=lambda: {c: Totals() for c in BK_CLASSES})
    namespaces: dict[str, dict[str, Totals]] = field(default_factory=dict)
    held_reasons: dict[str, int] = field(default_factory=dict)
    # (made for ``root`` and ``layout`` by ``__post_init__``)
    candidates: CandidateTable = field(init=False)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    not_ledgers: int = 0
    not_ledger_samples: list[str] = field(default_factory=list)
    missing_listed: list[dict[str, Any]] = field(default_factory=list)
    listed_in_bookkeeper: int = 0
    id_counter: int | None = None
    above_counter: list[int] = field(default_factory=list)
    references_high: int | None = None
    # records naming ledgers BookKeeper lacks (bk-missing): how many, and some of them
    bk_missing: int = 0
    bk_missing_samples: list[dict[str, Any]] = field(default_factory=list)
    # ledger ids handed off by the Pulsar-metadata source (read before the listing), and
    # how many of them this survey found gone from BookKeeper and forgot
    handed_off: int = 0
    handed_off_forgotten: int = 0
    # namespaces the Pulsar-metadata source removed (read with the hand-offs): their
    # ledgers are this cluster's, not held as an unknown namespace's
    removed_namespaces: int = 0
    # LEDGERGC_BK_REMOVE_UNREADABLE, as this survey classified by
    remove_unreadable: bool = False
    # registered BookKeeper targets this survey did not find orphaned -> why
    registered_reasons: dict[str, str] = field(default_factory=dict)
    # For each gone topic with candidates: the highest ledger id tagged with its name,
    # held ones included; a later scan that finds a higher one has seen the topic gain a
    # ledger: someone's live topic (a shared BookKeeper: cycle.py).
    gone_topic_high: dict[str, int] = field(default_factory=dict)
    # What the scan of the ledgers gathers, merged from every shard (not in the record):
    # the ids found (the listing's less those gone before their read: set at the end),
    # listed ids whose record names another topic, each gone topic's newest ledger, gone
    # topics with an open ledger.
    found: FoundIds = field(default_factory=FoundIds)
    foreign_ids: set[int] = field(default_factory=set)
    gone_high: dict[str, int] = field(default_factory=dict)
    open_gone: set[str] = field(default_factory=set)
    # What the survey cost ZooKeeper (reads, peak rate, the record cache, time per step).
    cost: SurveyCost = field(default_factory=SurveyCost)
    # Ledger id -> the Pulsar-metadata leftover whose records name it (its survey's), and
    # per leftover target the ledgers of them found here and their bytes: what the
    # metadata left behind holds back in BookKeeper.
    leftover_ids: Mapping[int, str] = field(default_factory=dict)
    leftover_ledgers: dict[str, Totals] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.candidates = CandidateTable(self.root, self.layout)

    @property
    def orphan_bytes(self) -> int:
        return sum(self.classes[c].bytes for c in BK_ORPHAN_CLASSES)

    def add(self, ledger: BkLedger, verdict: Verdict) -> None:
        size = ledger.bytes
        self.ledgers += 1
        self.bytes += size
        self.classes[verdict.ledger_class].add(size)
        namespace = classify.namespace_of(verdict.owner) or "(none)"
        per_ns = self.namespaces.get(namespace)
        if per_ns is None:
            per_ns = self.namespaces[namespace] = {}
        totals = per_ns.get(verdict.ledger_class)
        if totals is None:  # (not setdefault: a million ledgers would build as many Totals)
            totals = per_ns[verdict.ledger_class] = Totals()
        totals.add(size)
        if verdict.hold is not None:
            self.held_reasons[verdict.hold] = self.held_reasons.get(verdict.hold, 0) + 1
        if self.leftover_ids:
            target = self.leftover_ids.get(ledger.ledger_id)
            if target is not None:
                held_back = self.leftover_ledgers.get(target)
                if held_back is None:
                    held_back = self.leftover_ledgers[target] = Totals()
                held_back.add(size)
        if ledger.tags.application == classify.PULSAR:
            self.pulsar_ledgers += 1
        if verdict.ledger_class not in _COUNTED_ONLY:
            sample = self.samples.setdefault(verdict.ledger_class, [])
            if len(sample) < MAX_SAMPLES:
                sample.append({"ledger_id": ledger.ledger_id, **verdict.to_dict()})

    def merge(self, other: BookKeeperSurvey) -> None:
        """Add a shard's survey of its ledgers to this one."""
        self.ledgers += other.ledgers
        self.bytes += other.bytes
        self.pulsar_ledgers += other.pulsar_ledgers
        for name, totals in other.classes.items():
            mine = self.classes.setdefault(name, Totals())
            mine.ledgers += totals.ledgers
            mine.bytes += totals.bytes
        for namespace, per in other.namespaces.items():
            into = self.namespaces.setdefault(namespace, {})
            for name, totals in per.items():
                mine = into.setdefault(name, Totals())
                mine.ledgers += totals.ledgers
                mine.bytes += totals.bytes
        for hold, count in other.held_reasons.items():
            self.held_reasons[hold] = self.held_reasons.get(hold, 0) + count
        for target, totals in other.leftover_ledgers.items():
            mine = self.leftover_ledgers.setdefault(target, Totals())
            mine.ledgers += totals.ledgers
            mine.bytes += totals.bytes
        self.candidates.extend(other.candidates)
        for name, sample in other.samples.items():
            mine_sample = self.samples.setdefault(name, [])
            mine_sample.extend(sample[: max(0, MAX_SAMPLES - len(mine_sample))])
        self.not_ledgers += other.not_ledgers
        self.not_ledger_samples.extend(
            other.not_ledger_samples[: 20 - len(self.not_ledger_samples)]
        )
        self.foreign_ids |= other.foreign_ids
        for topic, high in other.gone_high.items():
            self.gone_high[topic] = max(self.gone_high.get(topic, -1), high)
        self.open_gone |= other.open_gone

    def hold_candidates(self, topics: set[str], hold: str, why: str) -> None:
        """Move the candidates of ``topics`` from their orphan class to ``bk-held``."""
        if not topics:
            return
        for candidate in self.candidates.remove(self.candidates.ids_of_topics(topics)):
            topic = classify.topic_of(candidate.target_class, candidate.ml_name)
            self._held(candidate, why.format(topic=topic), hold)

    def hold_ledgers(self, reasons: Mapping[int, str], hold: str) -> None:
        """Move the candidates of these ledger ids from their orphan class to
        ``bk-held``, each with its reason."""
        for candidate in self.candidates.remove(reasons.keys()):
            self._held(candidate, reasons[candidate.bk_ledger_id], hold)

    def _held(self, candidate: BkCandidate, why: str, hold: str) -> None:
        size, cls = candidate.bytes, candidate.target_class
        namespace = classify.namespace_of(candidate.ml_name) or "(none)"
        for totals in (self.classes, self.namespaces.setdefault(namespace, {})):
            moved = totals.setdefault(cls, Totals())
            moved.ledgers -= 1
            moved.bytes -= size
            totals.setdefault(classify.BK_HELD, Totals()).add(size)
        self.held_reasons[hold] = self.held_reasons.get(hold, 0) + 1
        sample = self.samples.setdefault(classify.BK_HELD, [])
        if len(sample) < MAX_SAMPLES:
            sample.append(
                {
                    "ledger_id": candidate.bk_ledger_id,
                    "class": classify.BK_HELD,
                    "owner": candidate.ml_name,
                    "reason": why,
                    "hold": hold,
                }
            )

    def unreadable(self) -> dict[str, Any]:
        """Unreadable ledger records: how many, how many go through the phases, and what
        they do to BookKeeper with the setting that decides (Pulsar 13480)."""
        count = self.classes[classify.BK_UNREADABLE].ledgers
        removable = self.candidates.count(classify.BK_UNREADABLE)
        if self.remove_unreadable:
            note = (
                f"{classify.UNREADABLE_HARM}. LEDGERGC_BK_REMOVE_UNREADABLE=true: {removable} "
                f"of {count} that no Pulsar record names go through the phases (grace, a live "
                "re-check, their bytes audited; `ledgergc restore --run <id>` puts them back); "
                "the others are kept"
            )
        else:
            note = (
                f"{classify.UNREADABLE_HARM}. {count} here, reported and kept: set "
                "LEDGERGC_BK_REMOVE_UNREADABLE=true to remove those no Pulsar record names "
                "through the phases (grace, a live re-check, their bytes audited; "
                "`ledgergc restore --run <id>` puts them back)"
            )
        return {
            "remove": self.remove_unreadable,
            "ledgers": count,
            "removable": removable,
            "note": note,
        }

    def to_manifest(self) -> dict[str, Any]:
        return {
            "hosts": self.hosts,
            "root": self.root,
            "layout": self.layout,
            "managed_ledgers": self.managed_ledgers,
            "ledgers": self.ledgers,
            "bytes": self.bytes,
            "orphan_bytes": self.orphan_bytes,
            "pulsar_ledgers": self.pulsar_ledgers,
            "classes": {name: totals.to_dict() for name, totals in self.classes.items()},
            "explanations": dict(classify.EXPLANATIONS),
            "namespaces": {
                ns: {name: totals.to_dict() for name, totals in sorted(per.items())}
                for ns, per in sorted(self.namespaces.items())
            },
            "held_reasons": dict(sorted(self.held_reasons.items())),
            "samples": self.samples,
            "not_ledgers": self.not_ledgers,
            "not_ledger_samples": self.not_ledger_samples,
            "missing_listed": self.missing_listed,
            "listed_in_bookkeeper": self.listed_in_bookkeeper,
            "bk_missing": {"count": self.bk_missing, "samples": self.bk_missing_samples},
            "unreadable": self.unreadable(),
            "id_counter": self.id_counter,
            "above_counter": self.above_counter[:MAX_SAMPLES],
            "above_counter_count": len(self.above_counter),
            "references_high": self.references_high,
            "handed_off": self.handed_off,
            "handed_off_forgotten": self.handed_off_forgotten,
            "removed_namespaces": self.removed_namespaces,
            "registered_reasons": self.registered_reasons,
            "gone_topic_high": self.gone_topic_high,
            "leftover_ledgers": {
                target: totals.to_dict() for target, totals in sorted(self.leftover_ledgers.items())
            },
            "candidates": len(self.candidates),
            "cost": self.cost.to_dict(),
        }


def with_later_holds(manifest: dict[str, Any], held: list[dict[str, Any]]) -> dict[str, Any]:
    """The survey's manifest with the ledgers a later step held (``held``: the phases
    step's, e.g. a gone topic that still grows across scans) moved from their orphan
    class to ``bk-held``, as ``hold_candidates`` moves the survey's own: the report's
    figures say what is really an orphan now (pure; the manifest is not changed)."""
    mine = [h for h in held if h.get("target_class") in BK_ORPHAN_CLASSES]
    if not mine:
        return manifest
    out = copy.deepcopy(manifest)
    zero = {"ledgers": 0, "bytes": 0}
    for item in mine:
        size, cls = int(item.get("bytes") or 0), item["target_class"]
        namespace = classify.namespace_of(item.get("ml_name") or "") or "(none)"
        for totals in (out["classes"], out["namespaces"].setdefault(namespace, {})):
            moved = totals.setdefault(cls, dict(zero))
            moved["ledgers"] -= 1
            moved["bytes"] -= size
            kept = totals.setdefault(classify.BK_HELD, dict(zero))
            kept["ledgers"] += 1
            kept["bytes"] += size
        out["candidates"] -= 1
        hold = classify.HOLD_GROWING_ELSEWHERE
        out["held_reasons"][hold] = out["held_reasons"].get(hold, 0) + 1
        sample = out["samples"].setdefault(classify.BK_HELD, [])
        if len(sample) < MAX_SAMPLES:
            sample.append(
                {
                    "ledger_id": item.get("ledger_id"),
                    "class": classify.BK_HELD,
                    "owner": item.get("ml_name"),
                    "reason": item.get("reason"),
                    "hold": hold,
                }
            )
        out["samples"][cls] = [
            s for s in out["samples"].get(cls, []) if s.get("ledger_id") != item.get("ledger_id")
        ]
    out["orphan_bytes"] = sum(out["classes"].get(c, zero)["bytes"] for c in BK_ORPHAN_CLASSES)
    return out


def _no_layout(bookkeeper: BookKeeperEndpoint) -> ConfigError:
    where = bookkeeper.where
    return ConfigError(
        f"LEDGERGC_BOOKKEEPER=true but {where}/LAYOUT does not exist: set "
        "LEDGERGC_BK_ZK_HOSTS (ensemble and chroot) and LEDGERGC_BK_LEDGERS_ROOT to "
        "BookKeeper's metadataServiceUri; metadata stores other than ZooKeeper (Oxia, etcd) "
        "are not supported. Nothing was scanned or deleted"
    )


def check_layout(endpoints: Endpoints) -> str | None:
    """The BookKeeper layout, read before a cycle starts anything (None: the source is
    off); a required root without one, or a layout ledger-gc cannot read, raises."""
    if not endpoints.bookkeeper_on:
        return None
    with MetadataStore.open(endpoints.bookkeeper.zk) as bk:
        layout = scan.layout_of(bk, endpoints.bookkeeper)
    if layout is None and endpoints.bookkeeper_mode == "true":
        raise _no_layout(endpoints.bookkeeper)
    return layout


def survey(
    endpoints: Endpoints,
    registered: Iterable[str] | None = None,
    *,
    spark: SparkSession | None = None,
    run_id: str = "bookkeeper",
    shared: Mapping[str, Any] | None = None,
) -> BookKeeperSurvey | None:
    """Survey the BookKeeper source; None when it is off (``auto`` and no LAYOUT).

    ``registered``: the registry's ``bookkeeper:`` prefixes, streamed (for the reasons
    of those this survey does not find orphaned). The driver lists every leaf directory; with
    ``spark``, a tree of several directories is read and classified on its executors
    (``_on_executors``), else here. CLOSED ledgers' records read by earlier cycles stand
    in for reads where the record cache shows their znodes unchanged
    (``record_cache``, ``directories``); what it cost ZooKeeper is the result's
    ``cost``. ``shared``: what the Pulsar-metadata survey of this cycle read before
    (``SurveyRequest.shared``): Pulsar's references (``pulsar_references``), used
    instead of reading ``/managed-ledgers`` again, and the ledgers its leftovers name
    (``leftover_ledgers``: id -> target), whose bytes the result counts per target;
    without them (that source off), the tree the S3 source's survey listed
    (``managed_ledger_tree``), whose records are then read here."""
    if not endpoints.bookkeeper_on:
        return None
    bookkeeper = endpoints.bookkeeper
    root = bookkeeper.root
    where = bookkeeper.where
    cost = SurveyCost(budget_per_second=bookkeeper.zk.max_reads_per_second)
    started = time.monotonic()
    with scan.sessions(endpoints.zk, bookkeeper) as (pulsar, bk):
        layout = scan.layout_of(bk, bookkeeper)
        if layout is None:
            if endpoints.bookkeeper_mode == "true":
                raise _no_layout(bookkeeper)
            if not endpoints.blocks.configured:
                # No block store and no BookKeeper: very likely a wrong root or chroot.
                log.warning(
                    "LEDGERGC_BUCKET is empty and %s/LAYOUT does not exist: the cycle has "
                    "no BookKeeper to scan; check LEDGERGC_BK_ZK_HOSTS and "
                    "LEDGERGC_BK_LEDGERS_ROOT, or set LEDGERGC_BOOKKEEPER=true to refuse",
                    where,
                )
            log.info("no BookKeeper at %s (no LAYOUT): the BookKeeper source is off", where)
            return None
        with cost.step("cache"):
            cache = record_cache.plan(endpoints, bk, layout)
        if spark is not None and (cache.full or _cached_work_for_executors(cache)):
            # Every record is read, or the cache's rows say the tree was large enough
            # for the executors: a large tree will want them, and a session started now
            # is ready by the time the listing is.
            from ledger_gc.spark.session import start_early

            start_early(spark)
        # Pulsar's references before BookKeeper's listing: a ledger created after this
        # read has an id above every id it names (classify.py's horizon). Read in full
        # every cycle: the cache keeps only the ledgers' own records.
        with cost.step("references"):
            refs = (shared or {}).get(SHARED_REFERENCES)
            if refs is None:  # (the Pulsar-metadata source is off: read them here)
                tree = (shared or {}).get(SHARED_MANAGED_LEDGERS)
                with configuration_store(pulsar, endpoints.config_store) as config:
                    refs = references.read_references(pulsar, policies=config, tree=tree)
            handed = _handed_off(endpoints)
            removed = handoff.removed_namespaces(endpoints.state)
        result = BookKeeperSurvey(bookkeeper.hosts, root, layout)
        result.leftover_ids = dict((shared or {}).get(SHARED_LEFTOVER_LEDGERS) or {})
        result.managed_ledgers = len(refs.listed)
        result.handed_off = len(handed)
        result.removed_namespaces = len(removed)
        result.remove_unreadable = endpoints.policy.bk_remove_unreadable
        classifier = classify.Classifier(
            refs,
            shared=endpoints.policy.bk_shared,
            handed_off=handed,
            remove_unreadable=endpoints.policy.bk_remove_unreadable,
            removed_namespaces=removed,
        )
        result.references_high = classifier.high
        with cost.step("listing"), record_cache.watching(bk) as watch:
            bk.sync(root)
            tops, listing = scan.top_directories(bk, root, layout)
            shards, odd = scan.shard_directories(bk, root, layout, tops)
            leaves = scan.list_leaves(bk, root, layout, shards)
            # After the listing: the probe parent's mark then postdates it, so a
            # ZooKeeper restored from before it shows next cycle (history_went_back).
            probed = record_cache.probe_cversion(bk) if cache.enabled else None
        probe = None if probed is None else probed.mark
        # A session that lost its connection may have moved to a server that counts
        # child changes otherwise: its listing proves nothing about cversion.
        proven = probe is not None and not watch.moved
        cannot = None
        if probed is not None and probed.why is not None:
            cannot = probed.why
        elif probed is not None and watch.moved:
            cannot = (
                "the ZooKeeper session lost its connection during the listing (it may be on "
                "another server now); " + record_cache.UNPROVEN
            )
        result.not_ledgers = (
            listing.not_ledger_count + odd.not_ledger_count + leaves.odd.not_ledger_count
        )
        result.not_ledger_samples = (
            listing.not_ledgers + odd.not_ledgers + leaves.odd.not_ledgers
        )[:20]
        works = _works(cache, leaves)
        states = {leaf.directory: leaf.state for leaf in leaves.leaves}
        cost.directories = len(works)
        log.info(
            "BookKeeper at %s (%s): %d ledger znodes in %d directories; record cache: %s",
            where,
            layout,
            leaves.ledger_count + len(listing.ledger_ids),
            len(works),
            cache.why,
        )
        with cost.step("ledgers"):
            flat_found = array("q")
            if listing.ledger_ids:  # the flat layout's ledgers are the root's own
                flat = list(scan.read_ledgers(bk, root, layout, listing.ledger_ids))
                scan_ledgers(flat, classifier, result)
                flat_found = array("q", sorted(ledger.ledger_id for ledger in flat))
                cost.records_read += len(listing.ledger_ids)
            if spark is not None and _worth_executors(works, cache):
                log.info("BookKeeper at %s (%s): %d shards on Spark", where, layout, len(works))
                with_cache = partial(_with_cache, endpoints.state, cache, proven, cost, states)
                results: Iterable[tuple[BookKeeperSurvey | None, list[DirectoryDone]]] = (
                    _on_executors(
                        spark,
                        endpoints,
                        layout,
                        works,
                        with_cache,
                        classifier,
                        cache.high,
                        run_id,
                        cost,
                        result.leftover_ids,
                    )
                )
            else:
                done_here = _here(
                    bk,
                    root,
                    layout,
                    works,
                    partial(_with_cache, endpoints.state, cache, proven, cost, states),
                    classifier,
                    cache.high,
                    result,
                )
                results = [(None, done_here)]
        # Each part's results as they come (a task's at a time), merged, and the cache's
        # rows of its directories written as they come, in the save's one transaction:
        # never every directory's records in the driver at once.
        absent = array("q")
        with cost.step("cache_save"):
            _save_cache(
                endpoints,
                cache,
                leaves,
                _merged(results, result, cost, absent),
                proven,
                probe,
            )
        # The ids found: the listing's own arrays less the few gone before their read
        # (no copy of them: 8 bytes a ledger that the listing holds anyway).
        found = result.found = FoundIds(
            [*(leaf.ledger_ids for leaf in leaves.leaves), flat_found], absent
        )
        # A topic this metadata lacks with an open ledger has a writer: another cluster's
        # live topic in a shared BookKeeper (even an idle one), or a delete under way.
        result.hold_candidates(
            result.open_gone,
            classify.HOLD_OPEN_WRITER,
            "topic {topic} is not in this metadata, but one of its ledgers is open: a "
            "writer has it (another Pulsar cluster sharing this BookKeeper, or a delete "
            "under way); every ledger of it is held",
        )
        # An offloaded copy goes only while its offloaded objects are there (the delete
        # checks again, live): the report shows the others held.
        copies = {
            lid: refs.offload_copies.get(lid)
            for lid in result.candidates.ids_of(classify.BK_OFFLOADED_COPY)
        }
        result.hold_ledgers(
            offloaded_copy.hold_reasons(endpoints.offload, copies),
            classify.HOLD_OFFLOAD_UNCONFIRMED,
        )
        judged = result.candidates.topics_among(result.gone_high.keys())
        result.gone_topic_high = {t: h for t, h in result.gone_high.items() if t in judged}
        with cost.step("checks"):
            result.missing_listed, result.listed_in_bookkeeper = _missing_listed(
                pulsar, refs, found - result.foreign_ids
            )
            missing = _missing_named(pulsar, refs, found - result.foreign_ids)
            missing.sort(key=lambda item: (item["topic"], item["ledger_id"]))
            result.bk_missing = len(result.missing_listed) + len(missing)
            listed = [
                _missing_item(m["ml_name"], m["ledger_id"], paths.managed_ledger_path(m["ml_name"]))
                for m in result.missing_listed[:MAX_SAMPLES]
            ]
            result.bk_missing_samples = sorted(
                listed + missing[:MAX_SAMPLES], key=lambda item: (item["topic"], item["ledger_id"])
            )[:MAX_SAMPLES]
    with cost.step("checks"):
        counter = _id_counter(endpoints.zk)
    result.id_counter = counter
    if counter is not None:
        result.above_counter = list(found.at_least(counter, ledger_paths.SHORT_ID_LIMIT))
    mine = (prefix for prefix in registered or {} if prefix.startswith(TARGET_SCHEME))
    for prefix in result.candidates.not_candidates(mine):
        result.registered_reasons[prefix] = _why_not(prefix, root, layout, found)
    result.handed_off_forgotten = _forget_handed_off(endpoints, result, handed, found)
    cost.cache = cache.to_dict() | {"cversion_proven": proven}
    if cannot is not None:
        cost.cache["cannot"] = cannot
    cost.total_seconds = time.monotonic() - started
    result.cost = cost
    return result


#: A cluster whose tree has at least this many leaf directories (each up to 10,000
#: ledgers) is read and classified on Spark's executors when the cycle has a session,
#: if that is more work for one Python process than ``SPARK_OVER_SECONDS``: a session
#: and its workers cost seconds to start and to ship work to (measured on two cores,
#: docs/BENCHMARKS.md figure 9, per ledger: its record read and decoded about 30 us, a
#: cached one about 7 us; a million cached ledgers are classified here faster than a
#: local session starts and takes them).
MIN_SHARDS_FOR_SPARK = 2
SPARK_OVER_SECONDS = 8.0
_READ_SECONDS = 30e-6
_CACHED_SECONDS = 7e-6


def _merged(
    results: Iterable[tuple[BookKeeperSurvey | None, list[DirectoryDone]]],
    into: BookKeeperSurvey,
    cost: SurveyCost,
    absent: array[int],
) -> Iterator[DirectoryDone]:
    """Each directory's outcome, its part's survey merged into ``into`` first (None:
    the driver classified it into ``into`` already); the ids gone before their read
    are added to ``absent``. A task's part is let go, and the memory it took given
    back, before the next is merged: each is a few MB of packed records, and the
    blocks each left free in the heap added up over forty parts at 10M."""
    for part, done in results:
        if part is not None:
            into.merge(part)
        for item in done:
            cost.records_read += item.read
            cost.records_cached += item.reused
            absent.extend(item.absent)
            yield item
        if part is not None:
            del part, done
            release_freed()


def _worth_executors(works: list[DirectoryWork], cache: record_cache.CachePlan) -> bool:
    """Whether the directories are more work than ``SPARK_OVER_SECONDS`` here (those
    the cache has a row of counted as cached: a guess, their rows not read yet)."""
    here = sum(
        len(w.ledger_ids)
        * (_CACHED_SECONDS if not cache.full and w.directory in cache.rows else _READ_SECONDS)
        for w in works
    )
    return _executors_pay(len(works), here)


def _cached_work_for_executors(cache: record_cache.CachePlan) -> bool:
    """Whether the ledgers the cache's rows had, each a cached record, are more work
    than ``SPARK_OVER_SECONDS`` here (``_worth_executors`` before the listing)."""
    ledgers = sum(row.ledgers for row in cache.rows.values())
    return _executors_pay(len(cache.rows), ledgers * _CACHED_SECONDS)


def _executors_pay(directories: int, seconds_here: float) -> bool:
    """Whether some directories, this many seconds of work in one Python process, are
    worth a Spark session and its workers."""
    return directories >= MIN_SHARDS_FOR_SPARK and seconds_here >= SPARK_OVER_SECONDS


def _works(cache: record_cache.CachePlan, leaves: scan.Leaves) -> list[DirectoryWork]:
    """Each leaf directory to classify, its cached records not yet with it."""
    return [
        DirectoryWork(leaf.directory, leaf.state.pzxid, leaf.ledger_ids, None, cache.enabled)
        for leaf in leaves.leaves
    ]


def _with_cache(
    state: StateEndpoint,
    cache: record_cache.CachePlan,
    proven: bool,
    cost: SurveyCost,
    states: Mapping[str, DirectoryState],
    works: list[DirectoryWork],
) -> list[DirectoryWork]:
    """Some directories' works with the cached records that may stand for reads
    (``record_cache.reusable``), their rows loaded now (a part's, not the cache's)."""
    if cache.full:
        return works
    rows = record_cache.load_rows(state, cache, (w.directory for w in works))
    out = []
    for work in works:
        cached = rows.get(work.directory)
        listed_state = states[work.directory]
        decision = reusable(
            cached.row if cached else None, listed_state, work.ledger_ids, proven=proven
        )
        cost.directories_reused[decision.why] = cost.directories_reused.get(decision.why, 0) + 1
        restate = cached is not None and (
            cached.row.state != listed_state or cached.row.proven != proven
        )
        body = cached.body if cached is not None and decision.reuse else None
        out.append(replace(work, body=body, restate=restate))
    return out


def _handed_off(endpoints: Endpoints) -> dict[int, classify.HandedOff]:
    """The ids the Pulsar-metadata source handed off, as the classifier takes them."""
    return {
        lid: classify.HandedOff(given.owner, given.named_by)
        for lid, given in handoff.handed_off(endpoints.state).items()
    }


def _forget_handed_off(
    endpoints: Endpoints,
    result: BookKeeperSurvey,
    handed: Mapping[int, classify.HandedOff],
    found: AbstractSet[int],
) -> int:
    """Forget the handed-off ids this BookKeeper no longer has (deleted: ids are never
    reused). Not when a guard of the root trips: another cluster's root, or a copy,
    lacks them all, and forgetting them would leave them held as another cluster's once
    the right root is surveyed again. (``max_fraction=1``: the byte-fraction guard says
    nothing about the root.)"""
    gone = [lid for lid in handed if lid not in found]
    if not gone or guards.bookkeeper_refusals(result.to_manifest(), 1.0, force=False):
        return 0
    return handoff.forget(endpoints.state, gone)


def _save_cache(
    endpoints: Endpoints,
    cache: record_cache.CachePlan,
    leaves: scan.Leaves,
    done: Iterable[DirectoryDone],
    proven: bool,
    probe: list[int] | None,
) -> None:
    """This cycle's rows: each directory's listing and its records now (a directory
    whose records came back; the others' rows stand as they are). ``done`` is read to
    its end whether the cache is on or not (the survey's parts come with it:
    ``record_cache.save`` reads its rows to the end either way)."""
    # Nothing to keep of a directory without ledgers (a row without records saves no
    # read), and one that can hold no ledger of this layout (a stray long path of small
    # ids in the hierarchical layout) has no row key of its own.
    kept = {leaf.directory: leaf for leaf in leaves.leaves if leaf.ledger_ids}
    high = max((leaf.ledger_ids[-1] for leaf in kept.values()), default=None)
    rows = (
        record_cache.NewRow(
            item.directory,
            kept[item.directory].state,
            kept[item.directory].ledger_ids,
            item.records,
            item.body,
        )
        for item in done
        if item.body is not None and item.directory in kept
    )
    record_cache.save(
        endpoints.state,
        cache,
        list(kept),
        rows,
        proven=proven,
        high=high,
        now_ms=now_ms(),
        probe=probe,
        keep_days=endpoints.policy.bk_record_cache_keep_days,
    )


def scan_ledgers(
    ledgers: Iterable[BkLedger],
    classifier: classify.Classifier,
    into: BookKeeperSurvey,
) -> None:
    """Classify and count some ledgers into ``into`` (one directory, or all)."""
    owner_of = classifier.owner_of
    for ledger in ledgers:
        tagged = classifier.gone_topic(ledger.tags)
        if tagged is not None:
            into.gone_high[tagged] = max(into.gone_high.get(tagged, -1), ledger.ledger_id)
            if (
                ledger.state is not None
                and ledger.state != records.CLOSED
                and ledger.tags.component == classify.MANAGED_LEDGER_COMPONENT
            ):
                into.open_gone.add(tagged)
        # A listed ledger whose record names another managed ledger is not the one the
        # list means: another cluster's ledger under the same id (a wrong root).
        listed_by = owner_of.get(ledger.ledger_id)
        if listed_by is not None and _names_other(ledger, listed_by):
            into.foreign_ids.add(ledger.ledger_id)
        verdict = classifier.classify(ledger)
        into.add(ledger, verdict)
        if verdict.candidate:
            into.candidates.add(ledger, verdict)


def _scan_into(
    classifier: classify.Classifier, into: BookKeeperSurvey, ledgers: Iterable[BkLedger]
) -> None:
    scan_ledgers(ledgers, classifier, into)


def _here(
    bk: MetadataStore,
    root: str,
    layout: str,
    works: list[DirectoryWork],
    with_cache: Callable[[list[DirectoryWork]], list[DirectoryWork]],
    classifier: classify.Classifier,
    high: int | None,
    into: BookKeeperSurvey,
) -> list[DirectoryDone]:
    """The directories read and classified in this process, a part of about
    ``PART_LEDGERS`` ledgers at a time with the classifier cut to it, as Spark's tasks
    are (``_on_executors``): the whole cluster's indexes (24 bytes a ledger, and their
    making) took the steady state's driver at 1M ledgers to 181 MiB, above the first
    survey's on Spark. Every part is classified before the cache's save begins: read
    while the save's transaction is open, a part's cached rows waited on its write lock
    (SQLite's, once the save's pages spill), and the lock was held through ZooKeeper's
    reads."""
    groups = split_works(works, _parts_of(works))
    parts = classifier.parts([_spans(group) for group in groups])
    done: list[DirectoryDone] = []
    for group in groups:
        # (no name holds a part's classifier while the next part's is cut)
        done += classify_directories(
            bk, root, layout, with_cache(group), high, partial(_scan_into, next(parts), into)
        )
    return done


def _on_executors(
    spark: SparkSession,
    endpoints: Endpoints,
    layout: str,
    works: list[DirectoryWork],
    with_cache: Callable[[list[DirectoryWork]], list[DirectoryWork]],
    classifier: classify.Classifier,
    high: int | None,
    run_id: str,
    cost: SurveyCost,
    leftovers: Mapping[int, str],
) -> Iterator[tuple[BookKeeperSurvey | None, list[DirectoryDone]]]:
    """The directories read and classified on executors, in parts of about
    ``PART_LEDGERS`` ledgers, each task over its own session with the classifier cut
    to its ledgers (``Classifier.common``, a broadcast, with the task's own
    ``Classifier.cuts``: a task holds its part, not the cluster), each at its share of
    the read budget: the tasks that run at once read no more than the
    budget together (``zk_share``). A task that fails fails the job: a partial scan is a
    refusal, never fewer ledgers. The job runs here; its tasks' results are kept where
    they ran and fetched a task's at a time by the returned iterator (``_fetched``)."""
    from pyspark import StorageLevel

    from ledger_gc.spark.session import at_once, job_error, job_group, zk_share

    started = time.monotonic()
    context = spark.sparkContext  # (a session still starting is waited for here)
    cost.seconds["spark_wait"] = time.monotonic() - started
    bookkeeper = endpoints.bookkeeper
    root = bookkeeper.root
    tasks = max(at_once(len(works), spark), _parts_of(works))
    groups = split_works(works, tasks)
    bk_endpoint = zk_share(bookkeeper.zk, len(groups), spark)  # pickled with the task
    leftover_ids = dict(leftovers)  # pickled with the task (the leftovers' ledgers: few)
    # What every task's classifier has whole (the topics' names, highest ids, cursors,
    # schemas) is sent once, a broadcast every executor fetches once; each task gets
    # its own part's cut, handed to the JVM as soon as it is packed (a ``parallelize``
    # of it alone; the job is their union): the driver holds the common part once and
    # one part at a time, never every task's (at 10M, forty at its peak).
    common, common_unpacked = pack_part(classifier.common())
    cost.executor_sent_bytes += len(common)
    cost.executor_sent_unpacked_bytes += common_unpacked
    shared = context.broadcast(common)
    del common
    handed = []
    cuts = classifier.cuts([_spans(g) for g in groups])
    for group in groups:
        # (a part's cut is let go as soon as it is packed: no name, nor a ``zip``'s kept
        # tuple, holds it while the next part's is made)
        packed, unpacked = pack_part((with_cache(group), next(cuts)))
        handed.append(context.parallelize([packed], 1))
        cost.executor_sent_bytes += len(packed)
        cost.executor_sent_unpacked_bytes += unpacked
        del packed
    cost.executor_tasks = len(handed)
    release_freed()  # (the cuts' indexes and labels, made and dropped a part at a time)

    def survey_part(packed_parts: Iterable[bytes]) -> Any:
        into = BookKeeperSurvey("", root, layout, leftover_ids=leftover_ids)
        done: list[DirectoryDone] = []
        # (The meter by its module: a closure's globals are pickled, and it has a lock.)
        mark = read_budget.METER.mark()
        started = time.monotonic()
        base = _shared_classifier(shared)
        # (what a task spends unpacking the classifier all share, and its own part)
        seconds = {"common": time.monotonic() - started, "unpack": 0.0}
        for packed in packed_parts:
            at = time.monotonic()
            mine, cut = unpack_part(packed)
            seconds["unpack"] += time.monotonic() - at
            if not mine:
                continue
            with MetadataStore.open(bk_endpoint) as bk:
                bk.sync(root)
                done += classify_directories(
                    bk,
                    root,
                    layout,
                    mine,
                    high,
                    partial(_scan_into, base.with_cut(cut), into),
                )
        seconds["task"] = time.monotonic() - started
        yield into, done, read_budget.METER.since(mark), seconds

    with job_group(spark, run_id, "bookkeeper", f"classify {len(works)} BookKeeper directories"):
        rdd = context.union(handed)
        results = rdd.mapPartitions(survey_part).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            results.count()  # (every task at once, as a collect would run them)
        except Exception as exc:
            _let_go(results, shared)
            raise job_error("the BookKeeper scan", exc) from exc
    return _fetched(spark, run_id, results, shared, cost)


def _fetched(
    spark: SparkSession, run_id: str, results: Any, shared: Any, cost: SurveyCost
) -> Iterator[tuple[BookKeeperSurvey | None, list[DirectoryDone]]]:
    """The tasks' results, one task's at a time (``toLocalIterator``: a job a task that
    reads its kept result): collected at once, at 10M ledgers they were 120 MiB of
    packed records and the candidates in the driver together. Then they are let go."""
    from ledger_gc.spark.session import job_error, job_group

    try:
        with job_group(spark, run_id, "bookkeeper", "fetch each BookKeeper part's results"):
            try:
                # (not prefetched: the next task's results, a few MB of packed records,
                # would be fetched and held while this one's are merged and written; the
                # results are kept where they ran, so each fetch is a short job)
                for part, done, reads, seconds in results.toLocalIterator(prefetchPartitions=False):
                    cost.add_remote("ledgers", reads)
                    for name, took in seconds.items():
                        cost.task_seconds[name] = cost.task_seconds.get(name, 0.0) + took
                    yield part, done
            except Exception as exc:
                raise job_error("the BookKeeper scan", exc) from exc
    finally:
        _let_go(results, shared)


def _let_go(results: Any, shared: Any) -> None:
    """Let a job's kept results and its broadcast go (best effort: a session already
    stopped keeps neither, and the cycle's own error, if any, is what counts)."""
    for kept in (results, shared):
        try:
            kept.unpersist()
        except Exception as exc:
            log.debug("could not let the BookKeeper scan's %r go: %s", kept, exc)


#: The classifier a survey's tasks share, as this Python worker last unpacked it, with
#: the packed bytes it came from (``_shared_classifier``).
_UNPACKED: dict[str, tuple[bytes, classify.Classifier]] = {}


def _shared_classifier(shared: Any) -> classify.Classifier:
    """The classifier all tasks share (``Classifier.common``, a broadcast), unpacked
    once a Python worker: Spark hands a worker task after task, and at 100,000 topics
    each of forty tasks unpacked 16 MB of it. Known by its packed bytes (a worker gets
    a new ``Broadcast`` object of a large one each task; comparing the bytes is a
    memcmp), and never changed: each task classifies with a copy (``with_cut``)."""
    packed: bytes = shared.value
    kept = _UNPACKED.get("common")
    if kept is not None and kept[0] == packed:
        return kept[1]
    # (the previous survey's, if any, goes before this one is made: no name holds it)
    del kept
    _UNPACKED.clear()
    base: classify.Classifier = unpack_part(packed)
    _UNPACKED["common"] = (packed, base)
    return base


def pack_part(part: object) -> tuple[bytes, int]:
    """What a task is sent (its part, or the classifier all share), and its pickled
    size before packing. Compressed, since it is mostly sorted ids (flat arrays whose
    high bytes repeat) and names, which the driver's JVM holds until the job ends:
    packed, several times smaller (the classifier all tasks share at 100,000 topics:
    16 MB pickled, 2.7 MB packed)."""
    packer = _Packer()
    # (packed as the pickler writes its frames: the whole pickle, 16 MB for the common
    # part at 100,000 topics, is never held beside its packed copy)
    pickle.dump(part, packer, protocol=pickle.HIGHEST_PROTOCOL)
    return packer.packed(), packer.size


class _Packer:
    """A file that packs what is written to it (``pack_part``)."""

    def __init__(self) -> None:
        self._zlib = zlib.compressobj(1)
        self._out: list[bytes] = []
        self.size = 0

    def write(self, data: bytes | bytearray | pickle.PickleBuffer) -> int:
        # (a buffer's bytes: the pickler hands a large one as it is, e.g. the
        # ``PickleBuffer`` of a numpy array, which has no ``len``)
        size = memoryview(data).nbytes
        self.size += size
        self._out.append(self._zlib.compress(data))
        return size

    def packed(self) -> bytes:
        self._out.append(self._zlib.flush())
        return b"".join(self._out)


def unpack_part(packed: bytes) -> Any:
    return pickle.loads(zlib.decompress(packed))


#: Ledgers a Spark task of the survey classifies, about (its part of the references and
#: of the record cache with it): what bounds an executor's memory, whatever the cluster.
PART_LEDGERS = 250_000


def _parts_of(works: Iterable[DirectoryWork]) -> int:
    """How many parts of about ``PART_LEDGERS`` ledgers the directories make (the
    driver's alone, or Spark's tasks at the least)."""
    ledgers = sum(len(work.ledger_ids) for work in works)
    return -(-ledgers // PART_LEDGERS)


def _spans(works: Iterable[DirectoryWork]) -> list[tuple[int, int]]:
    """The id ranges of some directories' listed ledgers."""
    return [(w.ledger_ids[0], w.ledger_ids[-1] + 1) for w in works if len(w.ledger_ids)]


def _names_other(ledger: BkLedger, ml_name: str) -> bool:
    """Whether a ledger's Pulsar tags name a managed ledger other than ``ml_name``."""
    tags = ledger.tags
    return (
        tags.application == classify.PULSAR
        and tags.component == classify.MANAGED_LEDGER_COMPONENT
        and tags.ml_name is not None
        and tags.ml_name != ml_name
    )


def _why_not(prefix: str, root: str, layout: str, found: AbstractSet[int]) -> str:
    znode = znode_of_target(prefix) or ""
    ledger_id = ledger_id_of_target(prefix, root, layout)
    if ledger_id is None:
        return f"{znode} is not a ledger of {root} ({layout}) any more; tracked no longer"
    if ledger_id not in found:
        return f"ledger {ledger_id}'s metadata is gone (deleted)"
    return f"ledger {ledger_id} is referenced again, or held (see the survey's classes)"


def _missing_listed(
    pulsar: MetadataStore, refs: classify.PulsarReferences, found: FoundIds
) -> tuple[list[dict[str, Any]], int]:
    """Listed ledgers (not offloaded with bookkeeperDeleted) that BookKeeper lacks, read
    again live: a trim or topic deletion since the references were read is not counted.
    (Many managed ledgers' ids asked of the ids found at once: ``FoundIds.lacking_each``.)"""
    suspects: dict[str, set[int]] = {}
    present = 0
    offloaded = refs.offloaded_deleted
    listed = refs.listed
    for name, lacked in found.lacking_each(listed.items()):
        lacking = [lid for lid in lacked if lid not in offloaded]
        if lacking:
            suspects[name] = set(lacking)
        ids = listed[name]
        present += len(ids) - len(lacking)
        if offloaded:  # (those are counted neither way)
            present -= sum(1 for lid in ids if lid in offloaded)
    if not suspects:
        return [], present
    names = sorted(suspects)
    znodes = [paths.managed_ledger_path(name) for name in names]
    pulsar.sync(paths.MANAGED_LEDGERS_ROOT)
    missing: list[dict[str, Any]] = []
    for name, path, raw in zip(names, znodes, pulsar.get_many_raw(znodes), strict=True):
        if raw is None:
            continue
        info = decode_managed_ledger_info(raw[0], path=path, allow_empty=True)
        still = {
            ledger.ledgerId
            for ledger in info.ledgerInfo
            if not (ledger.offloadContext.complete and ledger.offloadContext.bookkeeperDeleted)
        }
        missing.extend(
            {"ml_name": name, "ledger_id": lid} for lid in sorted(suspects[name] & still)
        )
    return missing, present


def _missing_item(ml_name: str, ledger_id: int, named_by: str) -> dict[str, Any]:
    return {"topic": topic_name(ml_name), "ledger_id": ledger_id, "named_by": named_by}


def topic_name(ml_name: str) -> str:
    """The topic a managed ledger is: ``t/ns/persistent/<encoded>`` (v1:
    ``p/c/ns/persistent/<encoded>``) -> ``persistent://t/ns/<name>``; else as it is."""
    head, sep, local = ml_name.rpartition("/persistent/")
    if not sep or not head or not local or "/" in local:
        return ml_name
    return f"persistent://{head}/{unquote_plus(local)}"


def _missing_named(
    pulsar: MetadataStore, refs: classify.PulsarReferences, found: AbstractSet[int]
) -> list[dict[str, Any]]:
    """Cursor and schema ledgers BookKeeper lacks, each record read again live: a cursor
    that switched ledgers or a schema rewritten since the references were read names
    another now. (Every id a record names existed before it was read, and the listing
    came after: an id not found is gone, not yet to come.)"""
    cursors = {key: lid for key, lid in refs.cursors.items() if lid >= 0 and lid not in found}
    schemas = {
        schema_id: missing
        for schema_id, index in refs.schemas.items()
        if (missing := index.ledger_ids - found)
    }
    if not cursors and not schemas:
        return []
    pulsar.sync("/")
    items: list[dict[str, Any]] = []
    keys = sorted(cursors)
    cursor_paths = [paths.cursor_path(name, cursor) for name, cursor in keys]
    for (name, _), path, raw in zip(
        keys, cursor_paths, pulsar.get_many_raw(cursor_paths), strict=True
    ):
        if raw is None:
            continue
        now = decode_managed_cursor_info(raw[0], path=path).cursorsLedgerId
        if now == cursors[(name, _)]:
            items.append(_missing_item(name, now, path))
    ids = sorted(schemas)
    schema_paths = [f"{references.SCHEMAS_ROOT}/{schema_id}" for schema_id in ids]
    for schema_id, path, raw in zip(
        ids, schema_paths, pulsar.get_many_raw(schema_paths), strict=True
    ):
        if raw is None:
            continue
        for lid in sorted(schemas[schema_id] & references.schema_index(raw[0]).ledger_ids):
            items.append({"topic": schema_id, "ledger_id": lid, "named_by": path})
    return items


def _id_counter(zk: ZkEndpoint) -> int | None:
    from ledger_gc.metadata.id_counter import read_id_counter

    return read_id_counter(zk)
