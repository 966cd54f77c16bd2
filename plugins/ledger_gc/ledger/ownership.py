"""Single-writer ownership of a managed ledger.

Pulsar lets one broker own a topic through an ephemeral znode; BookKeeper then fences
the previous writer's ledgers. Here the writer holds an ephemeral znode at
``/ledger-gc/owners/<ml-name>``. When its ZooKeeper session is suspended or lost the
handle stops acknowledging adds at once (it is *fenced*), because another process may
take over the managed ledger as soon as the session expires.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import uuid

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from ledger_gc.errors import ManagedLedgerFencedError
from ledger_gc.metadata.zk_client import guarded
from ledger_gc.rules.metadata.paths import owner_path


class Ownership:
    """The ephemeral owner znode of one managed ledger, and whether we still hold it."""

    def __init__(self, client: KazooClient, ml_name: str, hosts: str = "") -> None:
        self.client = client
        self.ml_name = ml_name
        self.hosts = hosts
        self.path = owner_path(ml_name)
        self.owner_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._lost = threading.Event()
        self._held = False

    def acquire(self) -> None:
        payload = json.dumps({"owner": self.owner_id}).encode()
        try:
            guarded(
                f"taking ownership of {self.ml_name}",
                self.hosts,
                lambda: self.client.create(self.path, payload, ephemeral=True, makepath=True),
            )
        except NodeExistsError as exc:
            holder = self._holder()
            raise ManagedLedgerFencedError(
                f"managed ledger {self.ml_name} is owned by another writer ({holder}); "
                "close it there first, or wait for that session to expire"
            ) from exc
        self._held = True
        self.client.add_listener(self._on_state)

    def _holder(self) -> str:
        try:
            data, _ = self.client.get(self.path)
            return str(json.loads(data).get("owner", "?"))
        except (NoNodeError, ValueError):
            return "?"

    def _on_state(self, state: str) -> bool | None:
        # SUSPENDED: the session may expire without us hearing of it, and a new owner may
        # then write; stop acknowledging now, as BookKeeper's fencing would make us.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._lost.set()
            return True  # remove the listener
        return None

    def check(self) -> None:
        """Raise if this handle may no longer write."""
        if self._lost.is_set() or not self._held:
            raise ManagedLedgerFencedError(
                f"managed ledger {self.ml_name}: ownership lost (ZooKeeper session "
                "suspended or expired); reopen it to write"
            )

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        self.client.remove_listener(self._on_state)
        if self._lost.is_set():
            return
        with contextlib.suppress(NoNodeError):
            self.client.delete(self.path)
