"""A Pulsar broker's ``broker.conf`` (``LEDGERGC_PULSAR_CONF``) -> the settings it names.

Operators point ledger-gc at the file their brokers run with, and every setting they have
not set otherwise is taken from it (``Settings.with_broker_conf``; an explicit
``LEDGERGC_*`` value, a connection, the variable or a run's params win). The keys and
their precedence are Pulsar's own:

* the metadata store: ``metadataStoreUrl``, else the older ``zookeeperServers``
  (``ServiceConfiguration.getMetadataStoreUrl``);
* the configuration store (tenants, namespaces' policies): ``configurationMetadataStoreUrl``,
  else the older ``configurationStoreServers``, else ``globalZookeeperServers``; all
  empty (the stock file's): the metadata store, so ``LEDGERGC_CONFIG_STORE_HOSTS`` stays
  unset;
* BookKeeper's metadata: ``bookkeeperMetadataServiceUri``; empty (the default) means
  Pulsar's own store, ``/ledgers`` below its chroot (``isBookkeeperMetadataStoreSeparated``
  is false), so ``LEDGERGC_BK_ZK_HOSTS`` stays unset;
* tiered storage: ``managedLedgerOffloadDriver`` (empty: off) and its bucket, region and
  endpoint. ``TieredStorageConfiguration.getKeys`` reads the driver's older spelling
  first and the generic ``managedLedgerOffload*`` after it; only two drivers have an
  older spelling (``getBackwardCompatibleKey``: ``s3ManagedLedgerOffload*`` for the
  ``aws-s3`` provider, ``gcsManagedLedgerOffload*`` for ``google-cloud-storage``), so for
  ``S3`` and ``aliyun-oss`` a stale ``s3ManagedLedgerOffloadBucket`` is not where the
  broker offloads. A key left empty, as the stock broker.conf leaves every one, counts
  as not set (Pulsar's FieldParser reads a blank value as null). Pulsar's offloaders
  write at the bucket's root (``<uuid>-ledger-<id>``): there is no prefix key;
* the cluster's name, ``clusterName``: what Pulsar tags its offloaded objects with
  (``LEDGERGC_PULSAR_CLUSTER``).

The driver (``LEDGERGC_OFFLOAD_DRIVER``) names the store: S3's API (``aws-s3``, ``S3``,
``aliyun-oss``), Google Cloud Storage (``google-cloud-storage``, whose service account
key file ``gcsManagedLedgerOffloadServiceAccountKeyFile`` is ``LEDGERGC_OFFLOAD_GCS_KEY_FILE``)
or Azure Blob Storage (``azureblob``: the container is the bucket; its account and key
are the brokers' environment, ``AZURE_STORAGE_ACCOUNT``/``AZURE_STORAGE_ACCESS_KEY``,
which the settings read as they are). The region is S3's only. With another driver
(``filesystem``, ``transient``) tiered storage stays off, and the settings say why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledger_gc.config.java_properties import parse_properties
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage.offload_drivers import PULSAR_DRIVERS, S3, family

PULSAR_CONF = "LEDGERGC_PULSAR_CONF"
#: The configuration store's keys, newest first (``ServiceConfiguration.
#: getConfigurationMetadataStoreUrl``: the older two are deprecated spellings of it).
CONFIGURATION_KEYS = (
    "configurationMetadataStoreUrl",
    "configurationStoreServers",
    "globalZookeeperServers",
)
#: The drivers with an older spelling of the offload keys, read before the generic one
#: (TieredStorageConfiguration.getBackwardCompatibleKey); every other driver has none.
OLDER_KEYS = {"aws-s3": "s3ManagedLedgerOffload", "google-cloud-storage": "gcsManagedLedgerOffload"}
GENERIC_OFFLOAD = "managedLedgerOffload"
#: The offload settings, by the suffix Pulsar's offload keys share.
OFFLOAD_FIELDS = (
    ("Bucket", "LEDGERGC_OFFLOAD_BUCKET"),
    ("Region", "LEDGERGC_OFFLOAD_S3_REGION"),
    ("ServiceEndpoint", "LEDGERGC_OFFLOAD_ENDPOINT"),
)
#: The settings that are one store's (its bucket, region, endpoint, key file): read from
#: the file only for the store its driver names (``Settings.with_broker_conf``).
STORE_SETTINGS = frozenset({env for _, env in OFFLOAD_FIELDS} | {"LEDGERGC_OFFLOAD_GCS_KEY_FILE"})
#: The brokers' GCS service account key file (``TieredStorageConfiguration``'s GCS
#: credentials), read for ``google-cloud-storage`` only.
GCS_KEY_FILE = ("gcsManagedLedgerOffloadServiceAccountKeyFile", "LEDGERGC_OFFLOAD_GCS_KEY_FILE")


@dataclass(frozen=True)
class ConfValue:
    """One setting a broker.conf names: the variable, its value, and the key it came from
    (with, where it says more than the value, why)."""

    env: str
    value: str
    key: str
    why: str = ""


def read_broker_conf(path: Path) -> list[ConfValue]:
    """The settings ``path`` names, or one ``ConfigError`` naming the file and the fix."""
    try:
        text = Path(path).read_bytes().decode("iso-8859-1")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"{PULSAR_CONF}={str(path)!r} cannot be read ({reason}); point it at a broker's "
            "broker.conf (e.g. /pulsar/conf/broker.conf), or unset it"
        ) from exc
    try:
        properties = parse_properties(text)
    except ValueError as exc:
        raise ConfigError(f"{PULSAR_CONF}={str(path)!r} is not a properties file: {exc}") from exc
    return settings_of(properties)


def settings_of(properties: dict[str, str]) -> list[ConfValue]:
    """The settings a broker's properties name (pure; see the module's docstring)."""
    found: list[ConfValue] = []
    store = _first(properties, "metadataStoreUrl", "zookeeperServers")
    if store is not None:
        found.append(ConfValue("LEDGERGC_ZK_HOSTS", *store))
    configuration = _first(properties, *CONFIGURATION_KEYS)
    if configuration is not None:
        found.append(ConfValue("LEDGERGC_CONFIG_STORE_HOSTS", *configuration))
    bookkeeper = _first(properties, "bookkeeperMetadataServiceUri")
    if bookkeeper is not None and bookkeeper[0] != "metadata-store:":
        found.append(ConfValue("LEDGERGC_BK_ZK_HOSTS", *bookkeeper))
    found.extend(_offload(properties))
    cluster = _first(properties, "clusterName")
    if cluster is not None:
        found.append(ConfValue("LEDGERGC_PULSAR_CLUSTER", *cluster))
    return found


def _offload(properties: dict[str, str]) -> list[ConfValue]:
    driver = _first(properties, "managedLedgerOffloadDriver")
    if driver is None:
        return []
    name, key = driver
    # Pulsar matches a driver's name ignoring case (JCloudBlobStoreProvider.getProvider).
    store = family(name)
    if store is None:
        why = (
            f"tiered storage off: {key}={name} is no object store ledger-gc reads "
            f"({', '.join(PULSAR_DRIVERS)})"
        )
        return [ConfValue("LEDGERGC_OFFLOAD_BUCKET", "", key, why)]
    older = OLDER_KEYS.get(name.lower())
    found = [ConfValue("LEDGERGC_OFFLOAD_DRIVER", name, key)]
    for suffix, env in OFFLOAD_FIELDS:
        if suffix == "Region" and store != S3:
            continue
        keys = [f"{older}{suffix}"] if older else []
        value = _first(properties, *keys, f"{GENERIC_OFFLOAD}{suffix}")
        if value is not None:
            found.append(ConfValue(env, *value))
    key_file = _first(properties, GCS_KEY_FILE[0]) if store != S3 else None
    if key_file is not None and name.lower() == "google-cloud-storage":
        found.append(ConfValue(GCS_KEY_FILE[1], *key_file))
    return found


def _first(properties: dict[str, str], *keys: str) -> tuple[str, str] | None:
    """``(value, key)`` of the first key set to something other than blanks."""
    for key in keys:
        value = properties.get(key, "").strip()
        if value:
            return value, key
    return None
