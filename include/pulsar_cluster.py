"""A Pulsar cluster's metadata as its brokers and bookies write it, for the demo and tests.

BookKeeper's side: ``<root>/LAYOUT`` (the hierarchical manager, Pulsar's default),
``INSTANCEID``, ``available``, ids drawn from ``<root>/idgen`` the way BookKeeper's
``ZkLedgerIdGenerator`` draws them (an ephemeral sequential ``ID-`` child, deleted at
once), and one metadata znode per ledger in format v3 (or v2, as a cluster older than
BookKeeper 4.10 still holds), tagged with Pulsar's custom metadata
(``LedgerMetadataUtils``). Pulsar's side: managed-ledger and cursor records, schema
locators, namespace policies. Each write is in the order Pulsar makes it: a ledger is
created before any record references it.

Pulsar's own metadata (DESIGN.md "Pulsar's own metadata"): tenants, namespace policies,
partitioned-topic metadata and cluster definitions go to the configuration store
(``config``, default the local store's session), the rest (managed ledgers, schemas,
local policies, bundle ownership and load data, registered brokers) to the local store,
in the JSON shapes Pulsar writes them. Ephemeral znodes (an owned bundle, a registered
broker) are created on a session the caller gives, so that closing it ends them the
way a broker's death does.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from ledger_gc.formats.markers import java_uuid
from ledger_gc.formats.records import encode_managed_cursor_info, encode_managed_ledger_info
from ledger_gc.proto import pulsar_schema_pb2
from ledger_gc.proto.bookkeeper_metadata_pb2 import LedgerMetadataFormat
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.rules.bookkeeper import ledger_paths, records
from ledger_gc.rules.metadata import paths

LAYOUT_TEXT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
FLAT_LAYOUT_TEXT = b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1"
LAYOUTS = {ledger_paths.HIERARCHICAL: LAYOUT_TEXT, ledger_paths.FLAT: FLAT_LAYOUT_TEXT}


def ml_tags(ml_name: str) -> dict[str, bytes]:
    return {
        "application": b"pulsar",
        "component": b"managed-ledger",
        "pulsar/managed-ledger": ml_name.encode(),
    }


def cursor_tags(ml_name: str, cursor: str) -> dict[str, bytes]:
    return {**ml_tags(ml_name), "pulsar/cursor": cursor.encode()}


def schema_tags(schema_id: str) -> dict[str, bytes]:
    return {"application": b"pulsar", "component": b"schema", "pulsar/schemaId": schema_id.encode()}


def compacted_tags(ml_name: str) -> dict[str, bytes]:
    tenant, ns, _, topic = ml_name.split("/", 3)
    return {
        "application": b"pulsar",
        "component": b"compacted-ledger",
        "pulsar/compactedTopic": f"persistent://{tenant}/{ns}/{topic}".encode(),
        "pulsar/compactedTo": b"\x08\x01\x10\x02",
    }


def bucket_tags(ml_name: str, cursor: str) -> dict[str, bytes]:
    return {
        "application": b"pulsar",
        "component": b"delayed-index-bucket",
        "pulsar/delayedIndexTopic": ml_name.encode(),
        "pulsar/delayedIndexCursor": cursor.encode(),
    }


def ledger_record(
    custom: Mapping[str, bytes],
    *,
    fmt: int = 3,
    closed: bool = True,
    length: int = 1024,
    ctime_ms: int | None = None,
) -> bytes:
    """A ledger's metadata record as BookKeeper writes it."""
    message = LedgerMetadataFormat(
        quorumSize=2,
        ensembleSize=3,
        ackQuorumSize=2,
        length=length if closed else 0,
        lastEntryId=9 if closed else -1,
        state=LedgerMetadataFormat.CLOSED if closed else LedgerMetadataFormat.OPEN,
        digestType=LedgerMetadataFormat.CRC32C,
        password=b"",
    )
    segment = message.segment.add(firstEntryId=0)
    segment.ensembleMember.extend(["bookie-1:3181", "bookie-2:3181", "bookie-3:3181"])
    if ctime_ms is not None:
        message.ctime = ctime_ms
    for key, value in custom.items():
        message.customMetadata.add(key=key, value=value)
    if fmt == 3:
        message.cToken = 7
        return records.encode_v3(message)
    return records.encode_v2(message)


#: ``OffloadIndexBlockImpl.INDEX_MAGIC_WORD``.
OFFLOAD_INDEX_MAGIC = 0xDE47DE47
#: The data object's length per offloaded ledger here (blocks of a 1 KiB ledger).
OFFLOADED_DATA_BYTES = 4096


def offload_index(data_length: int, data_header_length: int = 128) -> bytes:
    """An offloaded ledger's index object as ``OffloadIndexBlockImpl.toStream`` writes
    it (big-endian): magic, index length, the data object's length, the data header's
    length, the entry count and the ledger metadata's length (none here)."""
    length = 4 + 4 + 8 + 8 + 4 + 4
    return struct.pack(
        ">IIqqii", OFFLOAD_INDEX_MAGIC, length, data_length, data_header_length, 0, 0
    )


#: The cluster name a Pulsar standalone gives itself.
CLUSTER = "standalone"
#: A namespace's bundles as Pulsar splits it by default (``defaultNumberOfNamespaceBundles``
#: = 4): the boundaries of its hash range.
BOUNDARIES = ("0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff")


def bundle_ranges(boundaries: Sequence[str] = BOUNDARIES) -> list[str]:
    """Each bundle's name (``<lower>_<upper>``) as Pulsar keys it below ``/namespace/<ns>``
    and ``/loadbalance/bundle-data/<ns>``."""
    return [f"{lo}_{hi}" for lo, hi in itertools.pairwise(boundaries)]


def tenant_info(clusters: Sequence[str] = (CLUSTER,)) -> bytes:
    """``TenantInfo`` JSON, as ``/admin/policies/<tenant>`` holds it."""
    return json.dumps({"adminRoles": [], "allowedClusters": list(clusters)}).encode()


def policies_json(
    *,
    replication_clusters: Sequence[str] = (CLUSTER,),
    deleted: bool = False,
    boundaries: Sequence[str] = BOUNDARIES,
) -> bytes:
    """A namespace's ``Policies`` JSON (the fields a judge reads, and a few of the rest
    with Pulsar's defaults), as ``/admin/policies/<tenant>/<ns>`` holds it."""
    return json.dumps(
        {
            "auth_policies": {
                "namespace_auth": {},
                "destination_auth": {},
                "subscription_auth_roles": {},
            },
            "replication_clusters": list(replication_clusters),
            "bundles": {"boundaries": list(boundaries), "numBundles": len(boundaries) - 1},
            "backlog_quota_map": {},
            "clusterDispatchRate": {},
            "deleted": deleted,
            "encryption_required": False,
            "subscription_auth_mode": "None",
            "offload_threshold": -1,
            "schema_compatibility_strategy": "UNDEFINED",
            "is_allow_auto_update_schema": True,
            "schema_validation_enforced": False,
        }
    ).encode()


def offload_uuid(ledger_id: int) -> str:
    """The offload uuid ``PulsarCluster.managed_ledger`` gives an offloaded ledger."""
    return java_uuid(ledger_id, -ledger_id)


@dataclass
class PulsarCluster:
    """Writes a Pulsar cluster's metadata into ``client``'s chroot; with ``s3``, also
    the objects its offloader writes to ``offload_bucket`` (under ``offload_prefix``).

    ``bookkeeper``: a bookie's session for BookKeeper's side (LAYOUT, ids, ledger
    znodes), None: ``client``. With ``zkEnableSecurity=true`` a bookie logs in with SASL
    and creates every znode, parents included, with CREATOR_ALL: give it a client with
    that login and ``default_acl`` (its ACLs are then ``sasl:<its user>``).
    ``config``: the configuration store's session (tenants, namespace policies,
    partitioned-topic metadata, clusters), None: ``client``.
    """

    client: KazooClient
    root: str = "/ledgers"
    layout: str = ledger_paths.HIERARCHICAL
    bookkeeper: KazooClient | None = None
    s3: Any = None
    offload_bucket: str = "offload"
    offload_prefix: str = ""
    config: KazooClient | None = None
    #: The offload driver the ledgers' ``driverMetadata`` names (Pulsar's driver names:
    #: ``aws-s3``, ``google-cloud-storage``, ``azureblob``); ``s3`` is then any object
    #: writer with boto3's ``put_object`` (``demo_object_stores``).
    offload_driver: str = "aws-s3"
    #: The ``pulsarClusterName`` its offloader writes into each object's user metadata
    #: (None: none, as offloaders before Pulsar 2.10 wrote).
    cluster_name: str | None = None

    @property
    def bk(self) -> KazooClient:
        """The session BookKeeper's znodes are written with."""
        return self.bookkeeper or self.client

    @property
    def cfg(self) -> KazooClient:
        """The session the configuration store's znodes are written with."""
        return self.config or self.client

    def init(self, *, idgen: bool = True) -> PulsarCluster:
        """BookKeeper's root, as ``bookkeeper shell metaformat`` leaves it, with its id
        generator's parent (``idgen=False``: ids are given, as after a migration)."""
        self.bk.ensure_path(f"{self.root}/available")
        if idgen:
            self.bk.ensure_path(f"{self.root}/idgen")
        if not self.bk.exists(f"{self.root}/LAYOUT"):
            self.bk.create(f"{self.root}/LAYOUT", LAYOUTS[self.layout])
            self.bk.create(f"{self.root}/INSTANCEID", b"6e9e0a2c-demo")
        return self

    def next_id(self) -> int:
        """A ledger id the way ``ZkLedgerIdGenerator`` draws one."""
        made = self.bk.create(f"{self.root}/idgen/ID-", b"", ephemeral=True, sequence=True)
        self.bk.delete(made)
        return int(made.rsplit("-", 1)[1])

    def path(self, ledger_id: int) -> str:
        return ledger_paths.ledger_path(self.root, ledger_id, self.layout)

    def ledger(
        self,
        custom: Mapping[str, bytes],
        *,
        ledger_id: int | None = None,
        fmt: int = 3,
        closed: bool = True,
        length: int = 1024,
        ctime_ms: int | None = None,
    ) -> int:
        """Create a ledger's metadata znode (BookKeeper's ``createLedgerMetadata``)."""
        lid = self.next_id() if ledger_id is None else ledger_id
        data = ledger_record(custom, fmt=fmt, closed=closed, length=length, ctime_ms=ctime_ms)
        self.bk.create(self.path(lid), data, makepath=True)
        return lid

    def close(self, ledger_id: int, length: int = 4096) -> None:
        """Close an open ledger (a new version of its record)."""
        data, stat = self.bk.get(self.path(ledger_id))
        closed = records.decode_record(data)
        custom = dict(closed.custom)
        self.bk.set(
            self.path(ledger_id),
            ledger_record(custom, length=length, fmt=closed.format_version),
            version=stat.version,
        )

    # --- Pulsar's records --------------------------------------------------------------

    def namespace(self, tenant_ns: str) -> None:
        """A namespace: its policies node (empty: see ``policies`` for Pulsar's JSON), and
        its node in this cluster's local metadata (which stays when its topics are
        deleted). ``tenant/ns`` is a v2 namespace, ``property/cluster/ns`` a v1 one
        (``/admin/policies/<p>/<c>/<ns>``; its managed ledgers are
        ``p/c/ns/persistent/<topic>``)."""
        self.cfg.ensure_path(f"/admin/policies/{tenant_ns}")
        self.client.ensure_path(f"{paths.MANAGED_LEDGERS_ROOT}/{tenant_ns}")

    # --- the configuration store: tenants, policies, partitioned topics, clusters ------

    def tenant(self, tenant: str, clusters: Sequence[str] = (CLUSTER,)) -> None:
        """A tenant (``pulsar-admin tenants create``): ``/admin/policies/<tenant>`` with
        its ``TenantInfo`` JSON."""
        self._put(f"/admin/policies/{tenant}", tenant_info(clusters), self.cfg)

    def policies(
        self,
        tenant_ns: str,
        *,
        replication_clusters: Sequence[str] = (CLUSTER,),
        deleted: bool = False,
        boundaries: Sequence[str] = BOUNDARIES,
    ) -> None:
        """A namespace's policies (``pulsar-admin namespaces create``; ``deleted=True``:
        the mark a delete sets first), its tenant created first when it has none.
        ``tenant/ns`` (v2) or ``property/cluster/ns`` (v1)."""
        tenant = tenant_ns.split("/", 1)[0]
        if not self.cfg.exists(f"/admin/policies/{tenant}"):
            self.tenant(tenant, replication_clusters or (CLUSTER,))
        data = policies_json(
            replication_clusters=replication_clusters, deleted=deleted, boundaries=boundaries
        )
        self._put(f"/admin/policies/{tenant_ns}", data, self.cfg)

    def delete_policies(self, tenant_ns: str) -> None:
        """A namespace delete's step that removes the policies (what stays in the local
        store is what a delete stopped half way leaves)."""
        self.cfg.delete(f"/admin/policies/{tenant_ns}")

    def delete_tenant(self, tenant: str) -> None:
        """A tenant's policies gone, with every namespace's below it (the configuration
        store's ``/admin/partitioned-topics/<tenant>`` stays: Pulsar 12968)."""
        self.cfg.delete(f"/admin/policies/{tenant}", recursive=True)

    def partitioned_topic(
        self, tenant_ns: str, topic: str, partitions: int, *, deleted: bool = False
    ) -> list[str]:
        """A partitioned topic: its metadata (``/admin/partitioned-topics/<t>/<ns>/
        persistent/<topic>``, as ``PartitionedTopicMetadata`` JSON, in the configuration
        store; ``deleted=True``: a delete under way) names the base topic, which has no
        managed ledger of its own; each partition is one (``<topic>-partition-<i>``).
        Returns the partitions' managed-ledger names."""
        path = f"/admin/partitioned-topics/{tenant_ns}/persistent/{topic}"
        body: dict[str, Any] = {"partitions": partitions}
        if deleted:
            body["deleted"] = True
        self._put(path, json.dumps(body).encode(), self.cfg)
        return [f"{tenant_ns}/persistent/{topic}-partition-{i}" for i in range(partitions)]

    def cluster_definition(self, name: str = CLUSTER) -> None:
        """A cluster (``pulsar-admin clusters create``): ``/admin/clusters/<name>`` with
        its ``ClusterData`` JSON."""
        body = {
            "serviceUrl": f"http://{name}:8080",
            "brokerServiceUrl": f"pulsar://{name}:6650",
        }
        self._put(f"/admin/clusters/{name}", json.dumps(body).encode(), self.cfg)

    # --- the local store: local policies, bundles, brokers, heartbeats ------------------

    def local_policies(self, tenant_ns: str, boundaries: Sequence[str] = BOUNDARIES) -> None:
        """``/admin/local-policies/<ns>``: the bundles as this cluster split them."""
        body = {"bundles": {"boundaries": list(boundaries), "numBundles": len(boundaries) - 1}}
        self._put(f"/admin/local-policies/{tenant_ns}", json.dumps(body).encode())

    def bundle_data(self, tenant_ns: str, bundle: str | None = None) -> str:
        """The load manager's data of one bundle (``/loadbalance/bundle-data/<ns>/<range>``,
        ``BundleData`` JSON; default the first bundle). Returns its path."""
        bundle = bundle or bundle_ranges()[0]
        sample = {
            "numSamples": 0,
            "msgThroughputIn": 0.0,
            "msgThroughputOut": 0.0,
            "msgRateIn": 0.0,
            "msgRateOut": 0.0,
        }
        body = {"shortTermData": sample, "longTermData": sample, "topics": 1}
        path = f"/loadbalance/bundle-data/{tenant_ns}/{bundle}"
        self._put(path, json.dumps(body).encode())
        return path

    def own_bundle(self, tenant_ns: str, session: KazooClient, bundle: str | None = None) -> str:
        """A broker owning one bundle: an EPHEMERAL ``/namespace/<ns>/<range>`` on
        ``session`` (``NamespaceEphemeralData`` JSON); it goes with the session. Returns
        its path."""
        bundle = bundle or bundle_ranges()[0]
        body = {
            "nativeUrl": "pulsar://broker-1:6650",
            "httpUrl": "http://broker-1:8080",
            "disabled": False,
            "advertisedListeners": {},
        }
        path = f"/namespace/{tenant_ns}/{bundle}"
        session.ensure_path(path.rsplit("/", 1)[0])
        session.create(path, json.dumps(body).encode(), ephemeral=True)
        return path

    def broker(self, broker: str, session: KazooClient) -> str:
        """A registered broker: an EPHEMERAL ``/loadbalance/brokers/<host:port>`` on
        ``session`` (``LocalBrokerData`` JSON); it goes with the session (the broker's
        death). Returns its path."""
        host = broker.rsplit(":", 1)[0]
        body = {
            "webServiceUrl": f"http://{broker}",
            "pulsarServiceUrl": f"pulsar://{host}:6650",
            "lastUpdate": 0,
            "bundles": [],
        }
        path = f"/loadbalance/brokers/{broker}"
        session.ensure_path("/loadbalance/brokers")
        session.create(path, json.dumps(body).encode(), ephemeral=True)
        return path

    def heartbeat(
        self,
        broker: str,
        ledger_ids: Iterable[int] = (),
        *,
        cluster: str | None = CLUSTER,
        sla: bool = False,
    ) -> str:
        """A broker's heartbeat namespace's managed ledger (``healthcheck``): v1
        ``pulsar/<cluster>/<broker>`` (``cluster=None``: v2 ``pulsar/<broker>``), or with
        ``sla`` the SLA monitor's ``sla-monitor/<cluster>/<broker>``. Its namespace has no
        policies, by Pulsar's design. Returns the managed ledger's name."""
        if sla:
            namespace = f"sla-monitor/{cluster or CLUSTER}/{broker}"
        elif cluster is None:
            namespace = f"pulsar/{broker}"
        else:
            namespace = f"pulsar/{cluster}/{broker}"
        name = f"{namespace}/persistent/healthcheck"
        self.managed_ledger(name, ledger_ids)
        return name

    def managed_ledger(
        self,
        ml_name: str,
        ledger_ids: Iterable[int],
        *,
        offloaded_deleted: Iterable[int] = (),
    ) -> None:
        """A managed ledger listing ``ledger_ids``; those of ``offloaded_deleted`` are
        offloaded (complete, bookkeeperDeleted) by ``offload_driver`` to
        ``offload_bucket``, whose objects are uploaded first when the cluster has ``s3``."""
        info = ManagedLedgerInfo()
        gone = set(offloaded_deleted)
        for lid in sorted(ledger_ids):
            entry = info.ledgerInfo.add(ledgerId=lid, entries=10, size=1024, timestamp=1)
            if lid in gone:
                if self.s3 is not None:
                    self.offload_objects(lid, ml_name)
                context = entry.offloadContext
                context.uidMsb = lid
                context.uidLsb = -lid
                context.complete = True
                context.bookkeeperDeleted = True
                context.driverMetadata.name = self.offload_driver
                context.driverMetadata.properties.add(key="bucket", value=self.offload_bucket)
                if self.offload_driver == "aws-s3":
                    context.driverMetadata.properties.add(key="region", value="us-east-1")
        self._put(paths.managed_ledger_path(ml_name), encode_managed_ledger_info(info))

    def offload_keys(self, ledger_id: int) -> tuple[str, str]:
        """The data and index keys of an offloaded ledger (``offload_uuid``)."""
        base = f"{self.offload_prefix.strip('/')}/" if self.offload_prefix.strip("/") else ""
        data = f"{base}{offload_uuid(ledger_id)}-ledger-{ledger_id}"
        return data, f"{data}-index"

    def offload_objects(
        self, ledger_id: int, ml_name: str, *, data_bytes: int = OFFLOADED_DATA_BYTES
    ) -> None:
        """The two objects ``BlobStoreManagedLedgerOffloader`` writes for a ledger: the
        data (a multipart upload of its blocks) and then the index, which records the
        data object's length."""
        data_key, index_key = self.offload_keys(ledger_id)
        metadata = {"ManagedLedgerName": ml_name, "s3managedledgeroffloaderversion": "1"}
        if self.cluster_name:
            metadata["pulsarClusterName"] = self.cluster_name
        self.s3.put_object(
            Bucket=self.offload_bucket,
            Key=data_key,
            Body=b"d" * data_bytes,
            Metadata={**metadata, "role": "data"},
        )
        self.s3.put_object(
            Bucket=self.offload_bucket,
            Key=index_key,
            Body=offload_index(data_bytes),
            Metadata={**metadata, "role": "index"},
        )

    def cursor(
        self,
        ml_name: str,
        cursor: str,
        cursors_ledger_id: int = -1,
        *,
        properties: Mapping[str, int] | None = None,
        cursor_properties: Mapping[str, str] | None = None,
    ) -> None:
        info = ManagedCursorInfo(cursorsLedgerId=cursors_ledger_id)
        for name, value in (properties or {}).items():
            info.properties.add(name=name, value=value)
        for name, text in (cursor_properties or {}).items():
            info.cursorProperties.add(name=name, value=text)
        self._put(paths.cursor_path(ml_name, cursor), encode_managed_cursor_info(info))

    def schema(self, schema_id: str, versions: Iterable[tuple[int, int]]) -> None:
        """A schema locator naming ``(version, ledger id)`` pairs; the last is ``info``."""
        locator = pulsar_schema_pb2.SchemaLocator()
        pairs = list(versions)
        for version, lid in pairs:
            entry = locator.index.add(version=version, hash=b"h")
            entry.position.ledgerId = lid
            entry.position.entryId = 0
        locator.info.CopyFrom(locator.index[-1])
        self._put(f"/schemas/{schema_id}", locator.SerializeToString())

    def _put(self, path: str, data: bytes, client: KazooClient | None = None) -> None:
        client = client or self.client
        if client.exists(path):
            client.set(path, data)
        else:
            client.create(path, data, makepath=True)
