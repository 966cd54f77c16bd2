"""The offload bucket of a store, whichever driver family it is in (the factory).

Minimal version of the wire branch (issue 35): the config branch writes the full one
(same name and signature); S3 is ``storage.s3.OffloadStorage``, GCS and Azure are
imported lazily so that a missing SDK is one line naming the package.
"""

from __future__ import annotations

import importlib
from typing import Any

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import ConfigError
from ledger_gc.storage.offload_bucket import AZURE, GCS, S3, OffloadBucket

_CLASSES = {
    GCS: ("ledger_gc.storage.gcs_bucket", "GcsBucket", "google-cloud-storage"),
    AZURE: ("ledger_gc.storage.azure_container", "AzureContainer", "azure-storage-blob"),
}


def offload_bucket(store: ObjectStore, client: Any = None) -> OffloadBucket:
    """The ``OffloadBucket`` of ``store`` (``store.driver``: s3, gcs, azure)."""
    if store.driver == S3:
        from ledger_gc.storage.s3 import OffloadStorage

        return OffloadStorage(store, client)
    if store.driver not in _CLASSES:
        raise ConfigError(
            f"offload driver {store.driver!r} is not supported; set LEDGERGC_OFFLOAD_DRIVER "
            "to aws-s3, S3, google-cloud-storage or azureblob"
        )
    module_name, class_name, package = _CLASSES[store.driver]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"LEDGERGC_OFFLOAD_DRIVER names {store.driver} but {package} cannot be imported "
            f"({exc}); install {package}"
        ) from exc
    bucket: OffloadBucket = getattr(module, class_name)(store, client)
    return bucket
