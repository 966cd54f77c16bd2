"""A session to Pulsar's configuration store beside the local store's.

Pulsar keeps tenants, namespaces' policies (``/admin/policies``), partitioned-topic
metadata and cluster definitions in its *configuration store*
(``configurationMetadataStoreUrl``), which may be another ensemble, or another chroot of
the same one, than the local store holding ``/managed-ledgers`` (DESIGN.md "Pulsar's own
metadata"). Whatever reads policies is handed a ``MetadataStore`` for that store: the
local store's own session when the two are one (``Endpoints.config_store`` None), else a
session of its own, opened here with the configuration store's TLS, SASL and digest.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ledger_gc.config.endpoints import ZkEndpoint
from ledger_gc.metadata.store import MetadataStore


@contextmanager
def configuration_store(
    local: MetadataStore, endpoint: ZkEndpoint | None
) -> Iterator[MetadataStore]:
    """The configuration store: ``local`` when ``endpoint`` is None (one store), else a
    new session to ``endpoint``, closed with the ``with`` block."""
    if endpoint is None:
        yield local
        return
    with MetadataStore.open(endpoint) as store:
        yield store
