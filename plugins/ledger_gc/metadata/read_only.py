"""Whether ledger-gc may write this metadata: never under a live Pulsar broker.

A broker owns its managed ledgers in memory and fences a topic whose record changes under
it (a version mismatch on its next write), so against a live Pulsar ledger-gc writes no
metadata: the trim refuses, orphan and segment removal (which only read metadata) run.
``LEDGERGC_METADATA_READ_ONLY``: ``auto`` (read-only when brokers are registered under
``/loadbalance/brokers``, as every running Pulsar broker is), ``true`` or ``false``.
"""

from __future__ import annotations

from ledger_gc.metadata.store import MetadataStore

BROKERS_PATH = "/loadbalance/brokers"


def metadata_is_read_only(store: MetadataStore, mode: str) -> tuple[bool, str]:
    """(read-only?, why) for this run's ``LEDGERGC_METADATA_READ_ONLY`` (``mode``) and
    the brokers registered now."""
    if mode == "true":
        return True, "LEDGERGC_METADATA_READ_ONLY=true"
    if mode == "false":
        return False, "LEDGERGC_METADATA_READ_ONLY=false"
    brokers = store.children_of_many([BROKERS_PATH])[0]
    if brokers:
        shown = ", ".join(sorted(brokers)[:3])
        return True, f"{len(brokers)} Pulsar brokers are registered under {BROKERS_PATH} ({shown})"
    return False, f"no broker is registered under {BROKERS_PATH}"
