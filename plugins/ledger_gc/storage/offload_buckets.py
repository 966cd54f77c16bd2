"""The offload bucket of a store: ``offload_bucket(store) -> OffloadBucket``.

The one place that picks the implementation of ``OffloadBucket`` by the store's driver
(``ObjectStore.driver``, resolved at the edge from ``LEDGERGC_OFFLOAD_DRIVER`` or
broker.conf's ``managedLedgerOffloadDriver``): S3's ``storage.s3.OffloadStorage``, GCS's
``GcsBucket``, Azure's ``AzureContainer``. The GCS and Azure classes, and their SDKs, are
imported only when the store is theirs: the library imports and its S3 paths run
without ``google-cloud-storage`` or ``azure-storage-blob``, and a store whose SDK is
missing is one line naming the package to install (``ConfigError``, exit 2), not a
traceback halfway through a cycle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import ConfigError
from ledger_gc.storage.offload_bucket import AZURE, GCS, S3, OffloadBucket

if TYPE_CHECKING:
    from ledger_gc.storage.azure_container import AzureContainer


class _Implementation(NamedTuple):
    module: str
    cls: str
    #: The PyPI package whose absence the error names, and what the driver is called.
    package: str
    driver: str


#: The implementation of each family but S3's (imported lazily: ``offload_bucket``).
IMPLEMENTATIONS = {
    GCS: _Implementation(
        "ledger_gc.storage.gcs_bucket", "GcsBucket", "google-cloud-storage", "google-cloud-storage"
    ),
    AZURE: _Implementation(
        "ledger_gc.storage.azure_container", "AzureContainer", "azure-storage-blob", "azureblob"
    ),
}


def offload_bucket(store: ObjectStore, client: Any = None) -> OffloadBucket:
    """The ``OffloadBucket`` of ``store`` (``client``: an SDK client to use, for tests)."""
    if store.driver == S3:
        from ledger_gc.storage.s3 import OffloadStorage

        return cast(OffloadBucket, OffloadStorage(store, client))
    implementation = IMPLEMENTATIONS.get(store.driver)
    if implementation is None:
        raise ConfigError(
            f"offload store driver {store.driver!r} is none of {S3}, {GCS}, {AZURE}; set "
            "LEDGERGC_OFFLOAD_DRIVER to aws-s3, google-cloud-storage or azureblob"
        )
    try:
        module = importlib.import_module(implementation.module)
        return cast(OffloadBucket, getattr(module, implementation.cls)(store, client=client))
    except ImportError as exc:
        raise _missing(implementation, exc) from exc


def account_soft_delete_days(store: ObjectStore) -> int | None:
    """An Azure store's account blob soft delete retention in days as ``store``'s
    credentials read it (0: off; None: unreadable): what a container SAS minted for Spark
    cannot read, read with the key before it is replaced (``config.spark_credentials``)."""
    return cast("AzureContainer", offload_bucket(store)).soft_delete_days()


def _missing(implementation: _Implementation, exc: ImportError) -> ConfigError:
    """One line: which package (or which part of ledger-gc) the driver needs."""
    setting = f"LEDGERGC_OFFLOAD_DRIVER={implementation.driver}"
    missing = exc.name or ""
    if missing == implementation.module or missing.startswith("ledger_gc"):
        return ConfigError(
            f"{setting}: this ledger-gc has no {implementation.cls} ({implementation.module} "
            "cannot be imported); install a ledger-gc with that store's support"
        )
    return ConfigError(
        f"{setting} needs the {implementation.package} package, which is not installed "
        f"(no module {missing or 'of it'}); pip install {implementation.package} "
        "(pinned in requirements.txt)"
    )
