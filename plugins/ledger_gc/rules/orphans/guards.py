"""The safety guards of an orphan cycle (pure): when a scan's answer must not be acted on.

With tiered storage on, a scan whose offload bucket holds orphan segments but not one
live segment is refused too (``no-live-segments``): the same misconfiguration, seen
from the offload bucket.

DESIGN.md "Orphans": a scan that could not read all metadata, that finds no managed
ledgers while the bucket holds ledger data, or whose orphans exceed a fraction of all
bytes deletes nothing and says why, unless the run is forced. The usual cause of the last
two is a configuration mistake (a wrong ZooKeeper chroot, the wrong bucket or prefix), in
which *everything* looks orphaned: exactly when deleting would be a disaster.

A refused cycle also leaves the registry alone (no registration, no correction), so a
misconfigured run cannot start anybody's grace window either.

A partial metadata read never gets this far: the snapshot raises and the cycle stops
(``METADATA_READ`` names that refusal in the run log). It cannot be forced, because there
is no complete snapshot to act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

METADATA_READ = "metadata-read"
ZERO_MANAGED_LEDGERS = "zero-managed-ledgers"
ORPHAN_FRACTION = "orphan-fraction"
STALE_RUN = "stale-run"
STALE_METADATA = "stale-metadata"
NO_LIVE_SEGMENTS = "no-live-segments"
BK_ROOT_MISMATCH = "bookkeeper-root-mismatch"
BK_NO_MANAGED_LEDGERS = "bookkeeper-zero-managed-ledgers"
BK_STALE_METADATA = "bookkeeper-stale-metadata"
BK_ORPHAN_FRACTION = "bookkeeper-orphan-fraction"
#: Listed ledgers a BookKeeper root may lack (a topic half deleted, data lost) before
#: the root is taken for another cluster's or a copy: a share of the listed ledgers.
BK_MISSING_TOLERANCE = 0.10


@dataclass(frozen=True)
class Refusal:
    """A guard that tripped: its name and a reason an operator can act on."""

    guard: str
    reason: str
    forced: bool = False  # tripped, but the run was forced past it

    def to_dict(self) -> dict[str, Any]:
        return {"guard": self.guard, "reason": self.reason, "forced": self.forced}


def evaluate_guards(diff: dict[str, Any], max_fraction: float, *, force: bool) -> list[Refusal]:
    """The guards a diff trips. ``diff`` is ``diff.json``'s content (DiffResult manifest)."""
    refusals = []
    segments = int(diff.get("segment_objects") or 0)
    if diff["managed_ledgers"] == 0 and (diff["block_objects"] > 0 or segments > 0):
        # Tiered storage counts too: an empty chroot beside a full offload bucket would
        # make every offloaded segment an orphan.
        holds = " and ".join(
            part
            for part in (
                f"the bucket holds {diff['block_objects']} ledger blocks"
                if diff["block_objects"]
                else "",
                f"the offload bucket holds {segments} offloaded-ledger segment objects"
                if segments
                else "",
            )
            if part
        )
        refusals.append(
            Refusal(
                ZERO_MANAGED_LEDGERS,
                f"the metadata snapshot has no managed ledgers but {holds}: is "
                "LEDGERGC_ZK_HOSTS (its chroot), LEDGERGC_BUCKET, LEDGERGC_PREFIX or "
                "LEDGERGC_OFFLOAD_BUCKET wrong? A refused cycle registers and "
                "deletes nothing; force it only if every managed ledger really was deleted",
                forced=force,
            )
        )
    segment_classes = diff.get("classes") or {}
    live = int((segment_classes.get("live-segment") or {}).get("units") or 0)
    orphaned = int((segment_classes.get("orphan-segment") or {}).get("units") or 0)
    if orphaned and not live:
        # The trim's store probe, for tiered storage: a bucket in which not one segment
        # is carried by the metadata is more likely another cluster's offload bucket (or
        # a wrong prefix) than a bucket whose every offloaded topic was deleted.
        offload = diff.get("offload") or {}
        refusals.append(
            Refusal(
                NO_LIVE_SEGMENTS,
                f"offload bucket {offload.get('bucket')} (prefix '{offload.get('prefix')}') "
                f"holds {orphaned} offloaded segments and not one that a listed or marked "
                "ledger carries: is LEDGERGC_OFFLOAD_BUCKET or LEDGERGC_OFFLOAD_PREFIX "
                "another cluster's, or LEDGERGC_ZK_HOSTS the wrong chroot? A refused cycle "
                "registers and deletes nothing; force it only if every offloaded topic "
                "really was deleted",
                forced=force,
            )
        )
    fraction = float(diff["orphan_fraction"])
    if fraction > max_fraction:
        refusals.append(
            Refusal(
                ORPHAN_FRACTION,
                f"orphans are {fraction:.1%} of all bytes ({diff['orphan_bytes']} of "
                f"{diff['bytes']}), above the limit of {max_fraction:.1%} "
                "(LEDGERGC_ORPHAN_MAX_FRACTION): check the configuration first. A refused "
                "cycle registers and deletes nothing; force it (--force, DAG param force) "
                "if the leak is real",
                forced=force,
            )
        )
    return refusals


def stale_metadata(proof: list[Any], zk_hosts: str, *, force: bool) -> Refusal | None:
    """Refuse a scan whose data is newer than its metadata (issue 11, item 1).

    ``proof`` are ``horizon.Held`` targets above both their managed ledger's ledger list
    and the chroot's id counter: a store that registers before it writes cannot hold
    them, so the chroot read holds an older copy of the metadata. Every orphan such a
    copy shows may be live data it does not know. Forcing goes past the refusal, but
    the held targets themselves are never registered or deleted.
    """
    if not proof:
        return None
    first = proof[0]
    more = f" (and {len(proof) - 1} more)" if len(proof) > 1 else ""
    return Refusal(
        STALE_METADATA,
        f"the metadata at LEDGERGC_ZK_HOSTS={zk_hosts} is older than the data in the "
        f"bucket: {first.reason}{more}. A store registers a ledger before writing it, so "
        "this chroot holds an old copy (a DR replica, a restored snapshot?) that cannot "
        "tell live data from orphans. Point LEDGERGC_ZK_HOSTS at the live store's chroot. "
        "A refused cycle registers and deletes nothing",
        forced=force,
    )


def blocking(refusals: list[Refusal]) -> list[Refusal]:
    """The refusals that stop the run (those not forced past)."""
    return [refusal for refusal in refusals if not refusal.forced]


def bookkeeper_refusals(
    survey: dict[str, Any] | None, max_fraction: float, *, force: bool
) -> list[Refusal]:
    """The guards of the BookKeeper source (DESIGN.md "BookKeeper ledgers"), over the
    survey's record (``bookkeeper.survey.BookKeeperSurvey.to_manifest``)."""
    if not survey:
        return []
    where = f"{survey['hosts']}{survey['root']}"
    refusals = []
    fix = (
        "is LEDGERGC_BK_ZK_HOSTS (its chroot) or LEDGERGC_BK_LEDGERS_ROOT another cluster's "
        "BookKeeper, or LEDGERGC_ZK_HOSTS another cluster's Pulsar metadata? A refused "
        "cycle registers and deletes nothing"
    )
    if survey["managed_ledgers"] == 0 and survey["pulsar_ledgers"] > 0:
        refusals.append(
            Refusal(
                BK_NO_MANAGED_LEDGERS,
                f"the Pulsar metadata has no managed ledgers but BookKeeper at {where} holds "
                f"{survey['pulsar_ledgers']} Pulsar ledgers: {fix}; force it only if every "
                "topic really was deleted",
                forced=force,
            )
        )
    missing = survey.get("missing_listed") or []
    listed = len(missing) + int(survey.get("listed_in_bookkeeper") or 0)
    if missing and (
        len(missing) > BK_MISSING_TOLERANCE * listed or not survey.get("listed_in_bookkeeper")
    ):
        first = missing[0]
        refusals.append(
            Refusal(
                BK_ROOT_MISMATCH,
                f"{len(missing)} of the {listed} ledgers that managed ledgers list are not in "
                f"BookKeeper at {where} (e.g. ledger {first['ledger_id']} of "
                f"{first['ml_name']}, re-read live){_bk_missing(survey)}: {fix}",
                forced=force,
            )
        )
    live = int(((survey.get("classes") or {}).get("bk-live") or {}).get("ledgers") or 0)
    if survey["managed_ledgers"] and survey["pulsar_ledgers"] and not live and not missing:
        # The store probe, for BookKeeper: topics here, Pulsar ledgers there, and not one
        # of them referenced is another cluster's BookKeeper, not a cluster of leaks.
        refusals.append(
            Refusal(
                BK_ROOT_MISMATCH,
                f"BookKeeper at {where} holds {survey['pulsar_ledgers']} Pulsar ledgers and "
                f"not one that the {survey['managed_ledgers']} managed ledgers reference: {fix}",
                forced=force,
            )
        )
    above = survey.get("above_counter") or []
    if above:
        refusals.append(
            Refusal(
                BK_STALE_METADATA,
                f"{survey.get('above_counter_count', len(above))} BookKeeper ledgers (e.g. "
                f"{above[0]}) have ids at or above the ledger-id counter of the Pulsar "
                f"metadata ({survey.get('id_counter')}): the Pulsar metadata read is older "
                f"than BookKeeper's ledgers (a DR copy, a restored snapshot?): {fix}",
                forced=force,
            )
        )
    total = int(survey.get("bytes") or 0)
    orphaned = int(survey.get("orphan_bytes") or 0)
    if total and orphaned / total > max_fraction:
        refusals.append(
            Refusal(
                BK_ORPHAN_FRACTION,
                f"BookKeeper orphans are {orphaned / total:.1%} of its ledgers' bytes "
                f"({orphaned} of {total}), above the limit of {max_fraction:.1%} "
                "(LEDGERGC_ORPHAN_MAX_FRACTION): check the configuration first. A refused "
                "cycle registers and deletes nothing; force it (--force, DAG param force) "
                "if the leak is real",
                forced=force,
            )
        )
    return refusals


def _bk_missing(survey: dict[str, Any]) -> str:
    """The topics and ledgers the survey found missing (``bk_missing``), a few of each."""
    found = survey.get("bk_missing") or {}
    by_topic: dict[str, list[int]] = {}
    for item in found.get("samples") or []:
        by_topic.setdefault(str(item["topic"]), []).append(int(item["ledger_id"]))
    if not by_topic:
        return ""
    named = []
    for topic, ids in list(by_topic.items())[:5]:
        more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
        plural = "ledgers" if len(ids) > 1 else "ledger"
        named.append(f"{topic}: {plural} {', '.join(map(str, ids[:5]))}{more}")
    return (
        f"; records name {found.get('count', len(by_topic))} ledgers it lacks "
        f"(bk-missing: {'; '.join(named)})"
    )


#: Every refusal a forced run (``ledgergc orphans --force``, the DAG's ``force`` param)
#: goes past. Not ``metadata-read`` (no complete snapshot to act on) or ``stale-run`` (a
#: later scan was applied already): those stop a forced run too.
FORCEABLE = (
    ZERO_MANAGED_LEDGERS,
    NO_LIVE_SEGMENTS,
    ORPHAN_FRACTION,
    STALE_METADATA,
    BK_NO_MANAGED_LEDGERS,
    BK_ROOT_MISMATCH,
    BK_STALE_METADATA,
    BK_ORPHAN_FRACTION,
)
