"""The report's Pulsar-metadata section (pure): leftovers per class and store with the
BookKeeper bytes their records hold back, held leftovers, stuck deletes with the command
that finishes each, namespaces not replicated here, and its lines of text."""

from __future__ import annotations

from ledger_gc.orphans import report
from ledger_gc.orphans.records import DiffRecord
from ledger_gc.rules.orphans.outcomes import DELETED, RecheckResult
from ledger_gc.rules.pulsar_metadata.classes import LeftoverTotals, PulsarMetadataManifest

GONE = "pulsar-metadata:local:acme/gone"
HELD = "pulsar-metadata:local:acme/owned"


def manifest() -> dict:
    m = PulsarMetadataManifest("zk:2181/local", "zk:2181/config", namespaces=4, tenants=2)
    m.local_znodes = 120
    m.classes = {
        "pm-deleted-namespace": {"local": LeftoverTotals(1, 9, 700, 4)},
        "pm-stuck-delete": {"config": LeftoverTotals(1)},
        "pm-not-replicated-here": {"local": LeftoverTotals(1)},
    }
    m.leftovers = {GONE: "pm-deleted-namespace", HELD: "pm-deleted-namespace"}
    m.held = [{"target": HELD, "znodes": 3, "why": "a broker owns it: /namespace/acme/owned/x"}]
    m.held_count = 1
    m.held_targets = [HELD]
    m.samples = {
        "pm-stuck-delete": [
            {
                "name": "acme/stuck",
                "store": "config",
                "class": "pm-stuck-delete",
                "why": "policies of acme/stuck say deleted=true since 30 h",
                "command": "pulsar-admin namespaces delete --force acme/stuck",
            }
        ],
        "pm-not-replicated-here": [
            {"name": "acme/eu", "store": "local", "class": "pm-not-replicated-here", "why": "eu"}
        ],
    }
    return m.to_manifest()


def test_the_section_joins_the_bookkeeper_bytes_each_leftover_holds_back() -> None:
    bookkeeper = {
        "leftover_ledgers": {
            GONE: {"ledgers": 4, "bytes": 4096},
            HELD: {"ledgers": 1, "bytes": 1000},
        }
    }
    diff = DiffRecord(pulsar_metadata=manifest(), bookkeeper=bookkeeper)
    freed = RecheckResult(GONE, "pm-deleted-namespace", "acme/gone", None, "acme/gone", DELETED, "")
    freed = RecheckResult(**{**vars(freed), "objects": 9, "bytes": 700})
    section = report._pulsar_metadata(diff, [freed])
    assert section is not None
    assert section["classes"]["pm-deleted-namespace"]["local"]["ledger_bytes"] == 4096
    assert section["held_back"] == {"ledgers": 5, "bytes": 5096}
    assert section["held"][0]["ledger_bytes"] == 1000
    assert section["stuck_deletes"][0]["command"].endswith("--force acme/stuck")
    assert section["not_replicated_here"][0]["name"] == "acme/eu"
    assert (section["deleted"], section["znodes_deleted"], section["bytes_reclaimed"]) == (
        1,
        9,
        700,
    )
    assert "registered_reasons" not in section
    text = "\n".join(report._pulsar_metadata_lines(section))
    assert "leftovers hold back 5 BookKeeper ledgers" in text
    assert "held pulsar-metadata:local:acme/owned" in text
    assert "finish it: pulsar-admin namespaces delete --force acme/stuck" in text
    assert "not replicated here acme/eu" in text


def test_no_section_when_the_source_is_off() -> None:
    assert report._pulsar_metadata(DiffRecord(), []) is None
