"""The guard of the Pulsar-metadata source (pure), over the survey's record.

A configuration store that does not know this cluster's namespaces (a wrong address, a
store restored from another cluster's backup, a chroot mistyped) makes every namespace
look deleted: exactly when deleting would be a disaster. So when every namespace that
has managed ledgers (brokers' heartbeat namespaces aside) is judged deleted, the cycle
registers and deletes nothing, unless forced.
"""

from __future__ import annotations

from typing import Any

from ledger_gc.rules.orphans.guards import PM_UNKNOWN_NAMESPACES, Refusal


def refusals(survey: dict[str, Any] | None, *, force: bool) -> list[Refusal]:
    """The refusals over ``survey`` (``PulsarMetadataManifest.to_manifest``; None: off)."""
    if not survey:
        return []
    with_topics = int(survey.get("namespaces_with_topics") or 0)
    deleted = int(survey.get("deleted_with_topics_count") or 0)
    if not with_topics or deleted < with_topics:
        return []
    first = (survey.get("deleted_with_topics") or ["?"])[0]
    return [
        Refusal(
            PM_UNKNOWN_NAMESPACES,
            f"the configuration store does not know any namespace of this cluster: all "
            f"{with_topics} namespaces with topics in {survey.get('local_hosts')} (e.g. "
            f"{first}) have no policies in {survey.get('config_hosts')}. Is "
            "LEDGERGC_CONFIG_STORE_HOSTS (or LEDGERGC_ZK_HOSTS) another cluster's store or "
            "chroot? A refused cycle registers and deletes nothing; force it only if every "
            "namespace really was deleted",
            forced=force,
        )
    ]
