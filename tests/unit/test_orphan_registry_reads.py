"""The registry's reads for the survey (issue 36), on SQLite and PostgreSQL: one source's
prefixes by scheme (exactly: case and the scheme's characters, whatever the store's
collation), one source's entries by class, whether any is registered, and the mark
with the rule it answers (which entries were there when it was read)."""

from __future__ import annotations

from typing import Any

import pytest

from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_LEDGER
from ledger_gc.rules.orphans.classify import ORPHAN_LEDGER, ORPHAN_SEGMENT
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.pulsar_metadata.classes import PM_DELETED_TENANT


def _entry(prefix: str, target_class: str, first_scan: int = 1) -> RegistryEntry:
    return RegistryEntry(
        prefix, target_class, "t/ns/persistent/x", 1, 1, 1, first_scan, 1, 1, 1, 1, 1
    )


BK = [_entry(f"bookkeeper:/ledgers/L{n:05d}", BK_ORPHAN_LEDGER) for n in range(2500)]
OTHERS = [
    _entry("Bookkeeper:/ledgers/L1", ORPHAN_LEDGER),  # (an S3 key of that name)
    _entry("bookkeeper;/ledgers/L1", ORPHAN_LEDGER),
    _entry("bookkeeper/ledgers/L1", ORPHAN_LEDGER),
    _entry("bookkeepe", ORPHAN_LEDGER),
    _entry("offload:bucket/k", ORPHAN_SEGMENT),
    _entry("pulsar-metadata:config:gone", PM_DELETED_TENANT),
]


@pytest.mark.state_backends
def test_a_source_reads_its_own_prefixes_and_entries_streamed(state_location: Any) -> None:
    registry = OrphanRegistry(state_location)
    assert not registry.holds_any([BK_ORPHAN_LEDGER])
    with registry.transaction() as txn:
        txn.upsert_many([*OTHERS, *BK])

    assert list(registry.prefixes("bookkeeper:")) == [e.prefix for e in BK]
    assert list(registry.prefixes("pulsar-metadata:")) == ["pulsar-metadata:config:gone"]
    assert list(registry.prefixes("nothing:")) == []
    s3 = list(registry.entries_of_classes([ORPHAN_LEDGER, ORPHAN_SEGMENT]))
    assert sorted(s3, key=lambda e: e.prefix) == sorted(
        [e for e in OTHERS if e.target_class != PM_DELETED_TENANT], key=lambda e: e.prefix
    )
    assert registry.holds_any([ORPHAN_SEGMENT, "no-such-class"])
    assert not registry.holds_any(["no-such-class"])
    assert not registry.holds_any([])


@pytest.mark.state_backends
def test_the_mark_tells_the_entries_that_were_there(state_location: Any) -> None:
    registry = OrphanRegistry(state_location)
    empty = registry.mark()
    assert empty == {"scan": 0, "run_id": None}
    with registry.transaction() as txn:
        txn.record_scan("run-1", 1, {})
        txn.upsert(_entry("a", ORPHAN_LEDGER, first_scan=1))
    mark = registry.mark()
    assert mark == {"scan": 1, "run_id": "run-1"}
    with registry.transaction() as txn:
        txn.record_scan("run-2", 2, {})
        txn.upsert(_entry("b", ORPHAN_LEDGER, first_scan=2))
    with registry.transaction() as txn:
        saw, before_any = txn.surveyed(mark), txn.surveyed(empty)
        got = {p: (saw(e), before_any(e)) for p, e in txn.entries().items()}
    assert got == {"a": (True, False), "b": (False, False)}
    # A reset since: scan 1 is another run's, and nothing registered now was there.
    registry.reset(1)
    with registry.transaction() as txn:
        txn.record_scan("run-3", 3, {})
        txn.upsert(_entry("a", ORPHAN_LEDGER, first_scan=1))
    with registry.transaction() as txn:
        assert not txn.surveyed(mark)(txn.entries()["a"])
