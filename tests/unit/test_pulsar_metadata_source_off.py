"""A Pulsar-metadata source switched off keeps what it registered, and sends nothing."""

from __future__ import annotations

from pathlib import Path

from ledger_gc.config.endpoints import BookKeeperEndpoint, Endpoints, StateEndpoint, ZkEndpoint
from ledger_gc.config.zk_addresses import parse_zk_address
from ledger_gc.orphan_source import DeleteRequest
from ledger_gc.pulsar_metadata.source import PulsarMetadataSource
from ledger_gc.rules.orphans.outcomes import HELD
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.pulsar_metadata.classes import LOCAL, PM_DELETED_NAMESPACE, target_of


def test_registered_leftovers_are_kept_untouched_while_the_source_is_off(tmp_path: Path) -> None:
    """No lock of the configuration store is taken with the source off: its delete must
    neither raise (no fence) nor reach a server (this endpoint has none)."""
    zk = ZkEndpoint(parse_zk_address("LEDGERGC_ZK_HOSTS", "127.0.0.1:1/nowhere"))
    endpoints = Endpoints(
        zk,
        BookKeeperEndpoint(zk),
        state=StateEndpoint(tmp_path),
        pulsar_metadata_mode="false",
    )
    entry = RegistryEntry(
        prefix=target_of(LOCAL, "acme/gone"),
        target_class=PM_DELETED_NAMESPACE,
        ml_name="acme/gone",
        ledger_id=None,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=2,
        scans_seen=2,
        objects=3,
        bytes=10,
        newest_ms=0,
    )
    request = DeleteRequest(endpoints, "run", now_ms=10**13, deleting=True, should_stop=bool)
    [result] = PulsarMetadataSource().delete(request, [entry])
    assert result.action == HELD and "LEDGERGC_PULSAR_METADATA=false" in result.reason
