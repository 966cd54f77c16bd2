"""An executor's storage clients are reused per settings, and never across credentials."""

from __future__ import annotations

from ledger_gc.config.edge import block_store
from ledger_gc.config.settings import Settings
from ledger_gc.s3_orphans.reading import storage_for


def test_the_same_settings_share_a_client_and_other_credentials_do_not() -> None:
    base = Settings(s3_endpoint="http://127.0.0.1:9", bucket="b", prefix="p")
    alice = base.with_overrides(s3_access_key_id="alice", s3_secret_access_key="a-secret")
    bob = base.with_overrides(s3_access_key_id="alice", s3_secret_access_key="b-secret")
    assert repr(alice) == repr(bob)  # what the cache once keyed on alone
    assert storage_for(block_store(alice)) is storage_for(block_store(alice))
    assert storage_for(block_store(alice)) is not storage_for(block_store(bob))
    assert storage_for(block_store(base)) is not storage_for(block_store(alice))
