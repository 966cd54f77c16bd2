"""The survey reads of the orphan registry only what each source needs (issue 36).

A large cluster's registry holds hundreds of thousands of BookKeeper entries. The survey
step used to read the whole registry into the driver once per cycle, hand every source
all of it, and list every registered prefix in the run's diff record. Here a Pulsar
cluster without buckets (the S3 source has nothing to scan) whose registry holds many
BookKeeper entries and one Pulsar-metadata leftover is surveyed for real: no registry
entry is built in the driver (the sources read prefixes of their own scheme, streamed),
the Pulsar-metadata source sees only its own prefix, the BookKeeper source only its own,
and the diff record stays small.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper import survey as bk_survey
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle
from ledger_gc.orphans import registry as registry_module
from ledger_gc.orphans.records import DiffRecord, PhasesRecord
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import DIFF, RunSteps
from ledger_gc.pulsar_metadata import survey as pm_survey
from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_LEDGER, TARGET_SCHEME
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.pulsar_metadata.classes import PM_DELETED_NAMESPACE, target_of
from pulsar_cluster import PulsarCluster, ml_tags

pytestmark = pytest.mark.spark

#: BookKeeper entries registered (another source's, for the S3 and Pulsar-metadata ones).
MANY = 3000
TOPIC = "public/default/persistent/gone"
LEFTOVER = target_of("local", "gone-tenant/ns")


def _entry(prefix: str, target_class: str, ml_name: str, ledger: int | None) -> RegistryEntry:
    return RegistryEntry(prefix, target_class, ml_name, ledger, 1, 1, 1, 1, 1, 1, 1, 1)


@pytest.fixture
def cluster(settings: Settings, zk_client: KazooClient) -> Settings:
    """A Pulsar cluster with BookKeeper and no bucket, and a registry of scan 1 holding
    ``MANY`` BookKeeper ledgers (none of them in ZooKeeper) and one leftover."""
    c = PulsarCluster(zk_client).init()
    c.namespace("public/default")
    name = "public/default/persistent/a"
    c.managed_ledger(name, [c.ledger(ml_tags(name)) for _ in range(2)])
    no_buckets = settings.with_overrides(bucket="", offload_bucket="")
    bk = [
        _entry(
            f"{TARGET_SCHEME}/ledgers/00/{n // 10000:04d}/L{n % 10000:04d}",
            BK_ORPHAN_LEDGER,
            TOPIC,
            n,
        )
        for n in range(100_000, 100_000 + MANY)
    ]
    with OrphanRegistry(no_buckets).transaction() as txn:
        txn.record_scan("run-1", 1, PhasesRecord(applied=True).to_dict())
        txn.upsert_many([*bk, _entry(LEFTOVER, PM_DELETED_NAMESPACE, "gone-tenant/ns", None)])
    return no_buckets


def test_the_survey_reads_each_source_only_its_own_registered_targets(
    cluster: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []

    def counted(*fields: Any) -> RegistryEntry:
        built.append(fields[0])
        return RegistryEntry(*fields)

    monkeypatch.setattr(registry_module, "RegistryEntry", counted)
    pm_given: list[str] = []
    real_reasons = pm_survey._registered_reasons

    def pm_reasons(registered: Iterable[str], *rest: Any) -> dict[str, str]:
        pm_given.extend(registered)
        return real_reasons(list(pm_given), *rest)

    monkeypatch.setattr(pm_survey, "_registered_reasons", pm_reasons)
    bk_given: list[str] = []
    real_survey = bk_survey.survey

    def bk(endpoints: Any, registered: Iterable[str] | None = None, **options: Any) -> Any:
        bk_given.extend(registered or ())
        return real_survey(endpoints, list(bk_given), **options)

    monkeypatch.setattr(bk_survey, "survey", bk)

    cycle.step_survey(resolve(cluster), "run-a", spark)

    assert built == []  # no registry entry in the driver: prefixes, streamed
    assert pm_given == [LEFTOVER]
    assert len(bk_given) == MANY and all(p.startswith(TARGET_SCHEME) for p in bk_given)
    stored = RunSteps(cluster, "run-a").read_record(DIFF, DiffRecord)
    assert stored is not None
    assert "registered" not in stored.snapshot_facts
    assert stored.to_dict().get("registry_mark") == {"scan": 1, "run_id": "run-1"}
    # Every BookKeeper entry was explained (none is in ZooKeeper): that part is the
    # source's own; the rest of the record does not list the registry.
    record = stored.to_dict()
    assert len(record["bookkeeper"]["registered_reasons"]) == MANY
    del record["bookkeeper"]["registered_reasons"]
    assert len(json.dumps(record)) < 20_000


def test_the_s3_survey_reads_only_its_own_registered_entries(
    settings: Settings, zk_client: KazooClient, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a bucket to scan (the snapshot, the scan and the diff run), the facts of the
    registered S3 targets read those entries alone, and the record lists no prefix."""
    c = PulsarCluster(zk_client).init()
    c.namespace("public/default")
    name = "public/default/persistent/a"
    c.managed_ledger(name, [c.ledger(ml_tags(name)) for _ in range(2)])
    s3 = _entry(f"ledgers/{name}/ledgers/00000000000000000007/", "orphan-ledger", name, 7)
    bk = [
        _entry(f"{TARGET_SCHEME}/ledgers/L{n:06d}", BK_ORPHAN_LEDGER, TOPIC, n) for n in range(MANY)
    ]
    with OrphanRegistry(settings).transaction() as txn:
        txn.record_scan("run-1", 1, PhasesRecord(applied=True).to_dict())
        txn.upsert_many([*bk, s3])
    built: list[str] = []

    def counted(*fields: Any) -> RegistryEntry:
        built.append(fields[0])
        return RegistryEntry(*fields)

    monkeypatch.setattr(registry_module, "RegistryEntry", counted)

    cycle.step_survey(resolve(settings), "run-a", spark)

    assert built == [s3.prefix]
    stored = RunSteps(settings, "run-a").read_record(DIFF, DiffRecord)
    assert stored is not None
    assert "registered" not in stored.snapshot_facts
    assert stored.snapshot_facts["ml_rows"]  # the facts of the registered S3 ledger
    assert stored.to_dict().get("registry_mark") == {"scan": 1, "run_id": "run-1"}
