"""Pulsar's offload driver names -> the family of store ledger-gc reads (pure).

Pulsar names its tiered-storage drivers by jclouds' provider ids
(``JCloudBlobStoreProvider``), matched ignoring case: ``aws-s3`` and ``S3`` (and
``aliyun-oss``, which speaks S3's API) write to S3, ``google-cloud-storage`` to Google
Cloud Storage, ``azureblob`` to Azure Blob Storage. Others (``transient``, the
``filesystem`` offloader) are no object store ledger-gc reads. ledger-gc's own setting
(``LEDGERGC_OFFLOAD_DRIVER``) takes Pulsar's names and the families' own (``s3``,
``gcs``, ``azure``).

Where a ledger's copy went is what its offload recorded (``offloadContext.
driverMetadata``): ``name`` = the driver string, and properties
``managedLedgerOffloadDriver`` (the same string), ``bucket``, ``region`` and
``serviceEndpoint`` (brokers before 2.6 wrote ``endpoint``). ``offload_target`` reads
them: a copy whose family or bucket is not the configured one is not where ledger-gc
looks (neither live nor orphan there; its BookKeeper copy is held).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

#: The families (``ObjectStore.driver``; ``storage.offload_bucket``'s S3, GCS, AZURE).
S3, GCS, AZURE = "s3", "gcs", "azure"

#: Pulsar's driver strings (lower case) and ledger-gc's family names -> family.
DRIVERS: Mapping[str, str] = {
    "aws-s3": S3,
    "s3": S3,
    "aliyun-oss": S3,
    "google-cloud-storage": GCS,
    "gcs": GCS,
    "azureblob": AZURE,
    "azure": AZURE,
}
#: What ``LEDGERGC_OFFLOAD_DRIVER``'s error lists (Pulsar's spellings).
PULSAR_DRIVERS = ("aws-s3", "S3", "aliyun-oss", "google-cloud-storage", "azureblob")

#: driverMetadata's properties (``TieredStorageConfiguration.getOffloadDriverMetadata``).
DRIVER_PROPERTY = "managedLedgerOffloadDriver"
BUCKET_PROPERTY = "bucket"
REGION_PROPERTY = "region"
ENDPOINT_PROPERTY = "serviceEndpoint"
#: What brokers before 2.6 wrote for the endpoint.
OLD_ENDPOINT_PROPERTY = "endpoint"


def family(driver: str | None) -> str | None:
    """The family of a driver string (``s3``, ``gcs``, ``azure``); None: no object store
    ledger-gc reads (``filesystem``, ``transient``, empty, unknown)."""
    return DRIVERS.get((driver or "").strip().lower())


def check_driver(env: str, driver: str) -> None:
    """Raise ``ValueError`` naming ``env`` when ``driver`` is no family ledger-gc reads
    (the settings turn it into their one-line ``ConfigError``)."""
    if family(driver) is None:
        raise ValueError(
            f"{env}={driver!r} is not an offload driver ledger-gc reads; use one of "
            f"{', '.join(PULSAR_DRIVERS)} (as broker.conf's {DRIVER_PROPERTY})"
        )


#: Azure's container names: 3-63 of lower-case letters, digits and single hyphens,
#: starting and ending with a letter or digit (and the account's special containers).
_AZURE_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]")
_AZURE_SPECIAL = frozenset({"$root", "$web", "$logs"})
#: GCS's bucket names: lower-case letters, digits, '-', '_', '.', starting and ending
#: with a letter or digit; 3-63 characters, or up to 222 when dotted (63 between dots).
_GCS_BUCKET = re.compile(r"[a-z0-9](?:[a-z0-9._-]{1,220})[a-z0-9]")


def bucket_name_problem(family_name: str, bucket: str) -> str | None:
    """What the store of ``family_name`` refuses in ``bucket`` as a name (None: nothing;
    an empty bucket is tiered storage off, and S3's names are checked with the setting).
    Said before any request, for a name S3 takes that the store does not: a service
    answers those with a bare 400 code, and an SDK with a ValueError."""
    if not bucket:
        return None
    if family_name == AZURE:
        if bucket in _AZURE_SPECIAL or _AZURE_CONTAINER.fullmatch(bucket):
            return None
        return (
            "is no Azure container name (3-63 lower-case letters, digits and single "
            "hyphens, starting and ending with a letter or digit)"
        )
    if family_name == GCS:
        parts = bucket.split(".")
        too_long = len(bucket) > (222 if len(parts) > 1 else 63)
        if _GCS_BUCKET.fullmatch(bucket) and not too_long and all(len(p) <= 63 for p in parts):
            return None
        return (
            "is no GCS bucket name (3-63 lower-case letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit)"
        )
    return None


@dataclass(frozen=True)
class OffloadTarget:
    """Where an offload put a ledger's copy, as its ``driverMetadata`` records it."""

    #: The driver string as recorded (None: not recorded).
    driver: str | None
    #: Its family (None: not recorded, or no object store ledger-gc reads).
    family: str | None
    bucket: str | None = None
    region: str | None = None
    endpoint: str | None = None


def offload_target(name: str | None, properties: Mapping[str, str]) -> OffloadTarget:
    """``driverMetadata`` (its ``name`` and properties) -> where the copy is: the driver
    from ``name``, else the ``managedLedgerOffloadDriver`` property; the bucket, region
    and endpoint (``serviceEndpoint``, else the older ``endpoint``). A blank value is
    not recorded."""
    driver = _text(name) or _text(properties.get(DRIVER_PROPERTY))
    return OffloadTarget(
        driver,
        family(driver),
        _text(properties.get(BUCKET_PROPERTY)),
        _text(properties.get(REGION_PROPERTY)),
        _text(properties.get(ENDPOINT_PROPERTY)) or _text(properties.get(OLD_ENDPOINT_PROPERTY)),
    )


def _text(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None
