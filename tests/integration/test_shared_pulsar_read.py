"""One orphan cycle reads Pulsar's metadata once (issue 36, "What to build" 3): with no
block store, the Pulsar-metadata source and the BookKeeper source on, every listing
(getChildren) and every record (getData) under ``/managed-ledgers`` and ``/schemas`` is
asked of ZooKeeper at most once per cycle, whichever source needs it; what one source
read is handed to the next (``SurveyRequest.shared``), never kept across cycles.

The reads are recorded in this process at ``MetadataStore``'s read methods, with the
function of ledger-gc that asked (the survey runs on the driver: with no block store
no Spark job reads Pulsar's records)."""

from __future__ import annotations

import inspect
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans.cycle import run_orphan_cycle
from pulsar_cluster import CLUSTER, PulsarCluster, cursor_tags, ml_tags, schema_tags

pytestmark = pytest.mark.spark

#: The roots whose reads the two sources share.
SHARED_ROOTS = ("/managed-ledgers", "/schemas")
#: Frames that are no caller: the store's own, and this file's recording wrapper.
NOT_CALLERS = frozenset((Path(inspect.getfile(MetadataStore)).resolve(), Path(__file__).resolve()))
#: A namespace whose policies are gone (a leftover whose znodes are read with their
#: stats: that read is the leftover's own, ``read_units``, not a second listing).
GONE = "acme/gone"


class Reads:
    """Each read of a path under ``SHARED_ROOTS`` (``children``: getChildren, ``stat``:
    getChildren2, the children and the znode's stat of one moment, which only a
    leftover's znodes cost, ``data``: getData), with who asked (``module.function``)."""

    def __init__(self) -> None:
        self.by: dict[tuple[str, str], list[str]] = defaultdict(list)

    def record(self, kind: str, znodes: Sequence[str]) -> None:
        caller = _caller()
        for znode in znodes:
            if any(znode == root or znode.startswith(f"{root}/") for root in SHARED_ROOTS):
                self.by[(kind, znode)].append(caller)

    def twice(self) -> dict[str, list[str]]:
        """Each path read more than once: ``<kind> <path>`` -> who read it, in order."""
        return {f"{kind} {znode}": who for (kind, znode), who in self.by.items() if len(who) > 1}

    def total(self) -> int:
        return sum(len(who) for who in self.by.values())


def _caller() -> str:
    """The first function outside the store that asked for the read."""
    for frame in inspect.stack(context=0)[2:]:
        if Path(frame.filename).resolve() not in NOT_CALLERS:
            module = inspect.getmodulename(frame.filename) or frame.filename
            return f"{module}.{frame.function}"
    return "?"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    """Every read of the shared roots by any ``MetadataStore`` of this process."""
    seen = Reads()

    def recording(method: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def read(self: MetadataStore, znodes: Sequence[str], *args: Any, **kw: Any) -> Any:
            seen.record(kind, znodes)
            return method(self, znodes, *args, **kw)

        return read

    monkeypatch.setattr(
        MetadataStore, "children_of_many", recording(MetadataStore.children_of_many, "children")
    )
    monkeypatch.setattr(
        MetadataStore,
        "children_with_stats",
        recording(MetadataStore.children_with_stats, "stat"),
    )
    monkeypatch.setattr(MetadataStore, "get_many", recording(MetadataStore.get_many, "data"))
    yield seen


@pytest.fixture
def deployment(settings: Settings, zk_client: KazooClient) -> Settings:
    """A Pulsar cluster on BookKeeper with no block store and no tiered storage: v2
    topics with cursors and schemas, a namespace of non-persistent topics (a schema and
    no managed ledger), a v1 namespace's topic, a registered broker's heartbeat
    namespace, and a namespace deleted half way."""
    c = PulsarCluster(zk_client).init()
    c.cluster_definition()
    for namespace in ("acme/orders", "acme/events", "acme/volatile", GONE):
        c.policies(namespace)
        c.local_policies(namespace)
    for topic in (
        "acme/orders/persistent/a",
        "acme/orders/persistent/b",
        "acme/events/persistent/c",
    ):
        c.managed_ledger(topic, [c.ledger(ml_tags(topic)) for _ in range(2)])
        c.cursor(topic, "sub", c.ledger(cursor_tags(topic, "sub")))
    for schema_id in ("acme/orders/a", "acme/events/clicks", "acme/volatile/ticks"):
        c.schema(schema_id, [(0, c.ledger(schema_tags(schema_id)))])
    c.policies("legacy/standalone/old")
    v1 = "legacy/standalone/old/persistent/t"
    c.managed_ledger(v1, [c.ledger(ml_tags(v1))])
    gone = f"{GONE}/persistent/x"
    c.managed_ledger(gone, [c.ledger(ml_tags(gone))])
    c.cursor(gone, "sub", c.ledger(cursor_tags(gone, "sub")))
    c.schema(f"{GONE}/x", [(0, c.ledger(schema_tags(f"{GONE}/x")))])
    c.delete_policies(GONE)
    # A registered broker and its heartbeat namespace. (This cluster is named: unnamed,
    # the check of the configuration store, before the cycle and again in the survey,
    # lists the heartbeat and SLA tenants' levels of every local root to learn the name
    # from them, ``learned_clusters``: a few reads whatever the cluster's size.)
    c.broker("broker-1:8080", zk_client)
    c.heartbeat("broker-1:8080")
    return settings.with_overrides(
        pulsar_clusters=(CLUSTER,),
        pulsar_metadata="auto",
        bookkeeper="auto",
        bucket="",
        offload_bucket="",
        grace_seconds=24 * 3600,
        retention_seconds=0,
        orphan_max_fraction=1.0,
    )


@pytest.mark.parametrize(
    ("pulsar_metadata", "bookkeeper"),
    [("auto", "auto"), ("false", "auto"), ("auto", "false")],
    ids=["both-sources", "bookkeeper-alone", "pulsar-metadata-alone"],
)
def test_one_cycle_lists_and_reads_each_managed_ledger_and_schema_znode_once(
    deployment: Settings,
    spark: Any,
    reads: Reads,
    later: Callable[[float], dict[str, Any]],
    pulsar_metadata: str,
    bookkeeper: str,
) -> None:
    settings = deployment.with_overrides(pulsar_metadata=pulsar_metadata, bookkeeper=bookkeeper)
    report = run_orphan_cycle(resolve(settings), spark=spark, **later(0)).to_dict()
    assert report["status"] == "ok", report["refusals"]
    assert (report["pulsar_metadata"] is not None) == (pulsar_metadata != "false")
    assert (report["bookkeeper"] is not None) == (bookkeeper != "false")
    counted = Counter(who for callers in reads.by.values() for who in callers)
    twice = "\n".join(f"{path}: {', '.join(who)}" for path, who in reads.twice().items())
    assert not twice, f"{reads.total()} reads by {dict(counted)}; read twice:\n{twice}"
    # Only the leftover's znodes are read with their stats (a healthy namespace costs
    # no more than the listing).
    stats = sorted(znode for kind, znode in reads.by if kind == "stat")
    assert all(f"/{GONE}" in znode for znode in stats), stats
    # Every managed ledger counted, v1 and the leftover's too, by whichever source.
    assert report["snapshot"]["managed_ledgers"] == 6
    if report["bookkeeper"] is not None:
        assert report["bookkeeper"]["managed_ledgers"] == 6
