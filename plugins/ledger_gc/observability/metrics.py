"""The overview in Prometheus' text exposition format (version 0.0.4).

Orphan metrics carry KIP-370's proposed names (``OrphanLogPartitionCount``,
``OrphanLogPartitionSize``, and the same for orphan ledgers; ``OrphanOffloadedSegmentCount``
``OrphanOffloadedSegmentSize`` for tiered storage), so a dashboard built for
that proposal reads ours; their ``phase`` and ``namespace`` labels come from the latest
orphan cycle. ``OrphanBookKeeperLedgerCount`` and ``OrphanBookKeeperLedgerSize`` follow
them for BookKeeper's ledgers, by ``class`` and ``namespace`` as the latest cycle's survey
classified them (only while that source is on). Pulsar's own metadata (while that source
is on) is ``ledgergc_pulsar_metadata_*`` by ``class`` and ``store``, with the local store's
znode count before and after the cycle; ``ledgergc_bk_missing_ledgers`` counts the
ledgers Pulsar's records name that BookKeeper lacks. Everything else is ``ledgergc_*`` in
Prometheus' own naming style. The text
is rendered from ``build_overview``'s dict and nothing else, so the metrics and the page
always agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ledger_gc.observability.runs import LEDGER, PARTITION, PHASES, SEGMENT
from ledger_gc.rules.bookkeeper.classify import BK_LIVE

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (metric name, orphan class, "count" | "bytes", help text)
_ORPHAN_METRICS = (
    (
        "OrphanLogPartitionCount",
        PARTITION,
        "count",
        "Orphan partitions (managed-ledger prefixes with no metadata) per phase, latest cycle",
    ),
    (
        "OrphanLogPartitionSize",
        PARTITION,
        "bytes",
        "Bytes of orphan partitions per phase, latest orphan cycle",
    ),
    (
        "OrphanLogLedgerCount",
        LEDGER,
        "count",
        "Orphan ledgers (ledger prefixes their managed ledger does not list) per phase",
    ),
    (
        "OrphanLogLedgerSize",
        LEDGER,
        "bytes",
        "Bytes of orphan ledgers per phase, latest orphan cycle",
    ),
    (
        "OrphanOffloadedSegmentCount",
        SEGMENT,
        "count",
        "Orphan offloaded segments (tiered-storage <uuid>-ledger-<id> objects no ledger "
        "carries) per phase, latest orphan cycle",
    ),
    (
        "OrphanOffloadedSegmentSize",
        SEGMENT,
        "bytes",
        "Bytes of orphan offloaded segments per phase, latest orphan cycle",
    ),
)
# (metric name, "ledgers" | "bytes", help text)
_BOOKKEEPER_METRICS = (
    (
        "OrphanBookKeeperLedgerCount",
        "ledgers",
        "BookKeeper ledgers per class (bk-orphan-*, bk-offloaded-copy: deletable orphans; "
        "bk-held, bk-foreign, bk-unreadable: kept; bk-live) and namespace, latest orphan cycle",
    ),
    (
        "OrphanBookKeeperLedgerSize",
        "bytes",
        "Bytes (the ledgers' recorded length) of BookKeeper ledgers per class and namespace, "
        "latest orphan cycle",
    ),
)
Sample = tuple[Mapping[str, str], float | int]


def escape_label(value: str) -> str:
    """A label value as the text format wants it (backslash, quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format_value(value: float | int) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if value != value:  # NaN
        return "NaN"
    return repr(float(value))


def _family(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        label_text = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in sorted(labels.items()))
        series = f"{name}{{{label_text}}}" if label_text else name
        lines.append(f"{series} {_format_value(value)}")
    return lines


def _orphan_samples(orphans: Mapping[str, Any], cls: str, measure: str) -> list[Sample]:
    """One sample per phase and namespace with orphans in the latest cycle.

    Namespaces where that cycle counted nothing are left out: every namespace with data
    is in the cycle's report, and 36 zero series for each would be most of a big store's
    series. With no such namespace (or no per-namespace breakdown), one sample per phase
    with ``namespace=""`` (all namespaces). Before the first cycle: no samples at all, so
    "never ran" is not mistaken for "nothing orphaned"."""
    if orphans.get("latest") is None:
        return []
    tables = [
        (namespace, table)
        for namespace, table in (orphans.get("namespaces") or {}).items()
        if any(
            leaf["count"] or leaf["bytes"]
            for by_class in table.values()
            for leaf in by_class.values()
        )
    ] or [("", orphans.get("phases") or {})]
    samples: list[Sample] = []
    for namespace, table in tables:
        for phase in PHASES:
            leaf = (table.get(phase) or {}).get(cls) or {}
            samples.append(({"namespace": namespace, "phase": phase}, int(leaf.get(measure, 0))))
    return samples


def _bookkeeper_samples(bookkeeper: Mapping[str, Any], measure: str) -> list[Sample]:
    """One sample per class and namespace where the latest survey found ledgers.

    Live ledgers are one sample over all namespaces (``namespace=""``): every namespace
    has some, and a series for each would grow with the cluster, not with its leaks. A
    class with no ledger anywhere is one sample at 0 with ``namespace=""``, so every
    class is always there (a missing series reads as a broken exporter) and a sum over
    namespaces is still right. A summary without a per-namespace breakdown gives each
    class's total with ``namespace=""``."""
    classes: Mapping[str, Mapping[str, int]] = bookkeeper.get("classes") or {}
    namespaces: Mapping[str, Mapping[str, Mapping[str, int]]] = bookkeeper.get("namespaces") or {}
    samples: list[Sample] = []
    for cls, total in classes.items():
        per_namespace = [
            (namespace, int(leaf.get(measure, 0)))
            for namespace, by_class in namespaces.items()
            if (leaf := by_class.get(cls) or {}).get("ledgers")
        ]
        if cls == BK_LIVE or not per_namespace:
            per_namespace = [("", int(total.get(measure, 0)))]
        samples += [({"class": cls, "namespace": ns}, value) for ns, value in per_namespace]
    return samples


def _bookkeeper_lines(orphans: Mapping[str, Any]) -> list[str]:
    """The BookKeeper families; none at all while the source is off (or before its first
    survey): BookKeeper is an optional source, and a family of a source a cluster does
    not have would only be noise on its dashboards."""
    bookkeeper = orphans.get("bookkeeper")
    if not bookkeeper:
        return []
    lines: list[str] = []
    for name, measure, help_text in _BOOKKEEPER_METRICS:
        lines += _family(name, "gauge", help_text, _bookkeeper_samples(bookkeeper, measure))
    lines += _family(
        "ledgergc_bk_missing_ledgers",
        "gauge",
        "Ledgers a managed ledger, cursor or schema names that BookKeeper does not have "
        "(bk-missing: those topics cannot be read), latest orphan cycle",
        [({}, int((bookkeeper.get("bk_missing") or {}).get("count", 0)))],
    )
    cost = bookkeeper.get("cost") or {}
    if cost:
        lines += _family(
            "ledgergc_bookkeeper_survey_zk_reads",
            "gauge",
            "Znodes the latest BookKeeper survey read from ZooKeeper (driver and executors)",
            [({}, int(cost["zk_reads"]))],
        )
        lines += _family(
            "ledgergc_bookkeeper_survey_records",
            "gauge",
            "Ledger records the latest BookKeeper survey classified, by where they came from "
            '(source="read": its znode read; "cache": the record cache, no read)',
            [
                ({"source": "read"}, int(cost["records_read"])),
                ({"source": "cache"}, int(cost["records_cached"])),
            ],
        )
        lines += _family(
            "ledgergc_bookkeeper_survey_seconds",
            "gauge",
            "Seconds each step of the latest BookKeeper survey took",
            [({"step": step}, seconds) for step, seconds in cost["seconds"].items()],
        )
    return lines


# (metric name, measure, help text): per class and store, latest orphan cycle.
_PULSAR_METADATA_METRICS = (
    (
        "ledgergc_pulsar_metadata_leftovers",
        "leftovers",
        "Leftovers of Pulsar's metadata (one namespace's or tenant's znodes in one store) per "
        "class (pm-deleted-namespace, pm-deleted-tenant, pm-dead-broker: deletable; "
        "pm-stuck-delete, pm-not-replicated-here: reported) and store (local, config)",
    ),
    (
        "ledgergc_pulsar_metadata_znodes",
        "znodes",
        "Znodes of those leftovers per class and store, latest orphan cycle",
    ),
    (
        "ledgergc_pulsar_metadata_znode_bytes",
        "bytes",
        "Data bytes of those znodes per class and store, latest orphan cycle",
    ),
    (
        "ledgergc_pulsar_metadata_ledgers",
        "ledgers",
        "BookKeeper ledgers those leftovers name (held back until their metadata goes) "
        "per class and store, latest orphan cycle",
    ),
)


def _pulsar_metadata_lines(orphans: Mapping[str, Any]) -> list[str]:
    """The Pulsar-metadata families; none while the source is off (as BookKeeper's).
    Every class and store is a sample, 0 where nothing was found: a leak is a series
    going up, and a missing series reads as a broken exporter."""
    pm = orphans.get("pulsar_metadata")
    if not pm:
        return []
    lines: list[str] = []
    for name, measure, help_text in _PULSAR_METADATA_METRICS:
        samples: list[Sample] = [
            ({"class": cls, "store": store}, int(leaf.get(measure, 0)))
            for cls, per_store in (pm.get("classes") or {}).items()
            for store, leaf in per_store.items()
        ]
        lines += _family(name, "gauge", help_text, samples)
    znodes = pm.get("local_znodes") or {}
    lines += _family(
        "ledgergc_pulsar_metadata_local_znodes",
        "gauge",
        "Znodes under Pulsar's roots in the local metadata store as the latest cycle's "
        'survey counted them (when="before") and less what that cycle removed '
        '(when="after")',
        [({"when": when}, int(znodes.get(when, 0))) for when in ("before", "after")],
    )
    back = pm.get("held_back") or {}
    lines += _family(
        "ledgergc_pulsar_metadata_held_back_bytes",
        "gauge",
        "Bytes (the ledgers' recorded length) of the BookKeeper ledgers the leftovers name, "
        "latest orphan cycle",
        [({}, int(back.get("bytes", 0)))],
    )
    return lines


def _zookeeper_lines(orphans: Mapping[str, Any]) -> list[str]:
    """What the latest orphan cycle cost ZooKeeper (none before the first cycle)."""
    zookeeper = orphans.get("zookeeper") or {}
    if orphans.get("latest") is None or not zookeeper:
        return []
    lines = _family(
        "ledgergc_orphan_cycle_zk_reads",
        "gauge",
        "Znodes the latest orphan cycle read from ZooKeeper, per step (every read of a "
        "multi-read counts; driver and executors together)",
        [({"step": step}, int(v["reads"])) for step, v in zookeeper["by_step"].items()],
    )
    lines += _family(
        "ledgergc_orphan_cycle_zk_peak_reads_per_second",
        "gauge",
        "The most znodes the latest orphan cycle read in one second",
        [({}, int(zookeeper["peak_per_second"]))],
    )
    if zookeeper.get("max_reads_per_second"):
        lines += _family(
            "ledgergc_zk_max_reads_per_second",
            "gauge",
            "The bound on the znodes a cycle reads per second (LEDGERGC_ZK_MAX_READS_PER_SECOND)",
            [({}, float(zookeeper["max_reads_per_second"]))],
        )
    return lines


def render_metrics(overview: Mapping[str, Any]) -> str:
    """Prometheus text for an overview from ``build_overview``."""
    orphans = overview["orphans"]
    trim = overview["trim"]
    backlog = trim["backlog"]
    deletions = overview["deletions"]
    lines: list[str] = []
    for name, cls, measure, help_text in _ORPHAN_METRICS:
        lines += _family(name, "gauge", help_text, _orphan_samples(orphans, cls, measure))
    lines += _bookkeeper_lines(orphans)
    lines += _pulsar_metadata_lines(orphans)
    lines += _zookeeper_lines(orphans)
    refusals: dict[str, int] = {}
    latest_run = (orphans.get("latest") or {}).get("run_id")
    for refusal in orphans.get("refusals") or []:
        if refusal.get("run_id") == latest_run:
            guard = refusal.get("guard") or "unknown"
            refusals[guard] = refusals.get(guard, 0) + 1
    lines += _family(
        "ledgergc_orphan_guard_refusals",
        "gauge",
        "Safety guards that refused deletion in the latest orphan cycle",
        [({"guard": guard}, count) for guard, count in sorted(refusals.items())],
    )
    lines += _family(
        "ledgergc_trim_markers_pending",
        "gauge",
        "Ledgers marked deletable whose data is not deleted yet (the trim backlog)",
        [({}, int(backlog["pending_markers"]))],
    )
    lines += _family(
        "ledgergc_trim_marker_pending_bytes",
        "gauge",
        "Bytes of the ledgers marked deletable and not deleted yet",
        [({}, int(backlog["pending_bytes"]))],
    )
    lines += _family(
        "ledgergc_trim_marker_oldest_age_seconds",
        "gauge",
        "Age of the oldest deletable marker (0 when there is none)",
        [({}, float(backlog["oldest_age_seconds"] or 0))],
    )
    lines += _family(
        "ledgergc_reclaimed_bytes_total",
        "counter",
        "Bytes deleted and freed, per operation, over the whole audit log (not those a "
        "versioned bucket keeps: ledgergc_recoverable_bytes_total)",
        [
            ({"operation": operation}, int(value))
            for operation, value in sorted(deletions["reclaimed_bytes"].items())
        ],
    )
    lines += _family(
        "ledgergc_recoverable_bytes_total",
        "counter",
        "Bytes deleted from listings but kept by a versioned bucket as noncurrent versions "
        "(still billed until a lifecycle rule expires them), per operation",
        [
            ({"operation": operation}, int(value))
            for operation, value in sorted(deletions.get("recoverable_bytes", {}).items())
        ],
    )
    lines += _family(
        "ledgergc_last_success_timestamp_seconds",
        "gauge",
        "When the latest run that completed finished (Unix time), per job",
        [
            ({"job": job}, last["time_ms"] / 1000)
            for job, last in sorted(overview["last_success"].items())
            if last and last.get("time_ms")
        ],
    )
    return "\n".join(lines) + "\n"
