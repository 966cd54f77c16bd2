"""A session to Pulsar's configuration store beside the local store's.

Pulsar keeps tenants, namespaces' policies (``/admin/policies``), partitioned-topic
metadata and cluster definitions in its *configuration store*
(``configurationMetadataStoreUrl``), which may be another ensemble, or another chroot of
the same one, than the local store holding ``/managed-ledgers`` (DESIGN.md "Pulsar's own
metadata"). Whatever reads policies is handed a ``MetadataStore`` for that store: the
local store's own session when the two are one (``Endpoints.config_store`` None), else a
session of its own with the configuration store's TLS, SASL and digest.

That session opens at its first use, and is synced then: most cycles never need a
policy to tell a level of ``/managed-ledgers`` (the tree proves its shape), and a
``ledgergc status`` or a trim should neither pay for a second session nor fail because
the configuration store is down when they read nothing from it. Where one is needed and
cannot be had, the read fails as any metadata read does (closed: nothing decided).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, cast

from ledger_gc.config.endpoints import ZkEndpoint
from ledger_gc.metadata.store import MetadataStore


class _OnFirstUse:
    """A ``MetadataStore`` of ``endpoint`` opened (and synced) at its first use, closed
    with ``stack``; ``sync`` before that is the open's own."""

    def __init__(self, endpoint: ZkEndpoint, stack: ExitStack) -> None:
        self._endpoint = endpoint
        self._stack = stack
        self._store: MetadataStore | None = None

    @property
    def opened(self) -> bool:
        return self._store is not None

    def _open(self) -> MetadataStore:
        if self._store is None:
            store = self._stack.enter_context(MetadataStore.open(self._endpoint))
            store.sync("/")
            self._store = store
        return self._store

    def sync(self, path: str = "/") -> None:
        if self._store is not None:
            self._store.sync(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._open(), name)

    def __repr__(self) -> str:
        state = "open" if self.opened else "not opened yet"
        return f"<configuration store {self._endpoint!r}, {state}>"


@contextmanager
def configuration_store(
    local: MetadataStore, endpoint: ZkEndpoint | None
) -> Iterator[MetadataStore]:
    """The configuration store: ``local`` when ``endpoint`` is None (one store), else a
    session to ``endpoint`` opened at its first use, closed with the ``with`` block."""
    if endpoint is None:
        yield local
        return
    with ExitStack() as stack:
        yield cast(MetadataStore, _OnFirstUse(endpoint, stack))
