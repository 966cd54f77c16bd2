"""ZooKeeper paths of the store (pure). Fixed by DESIGN.md; all are below the chroot."""

from __future__ import annotations

MANAGED_LEDGERS_ROOT = "/managed-ledgers"
# BookKeeper's ledger-id generator: sequential znodes under this parent (see ledger/ids.py).
LEDGER_IDGEN_PATH = "/ledgers/idgen"
# Ephemeral owner znodes of managed-ledger writers (see ledger/ownership.py). They live
# outside /managed-ledgers so that a managed ledger's children stay its cursors only.
OWNERS_ROOT = "/ledger-gc/owners"


def managed_ledger_path(ml_name: str) -> str:
    return f"{MANAGED_LEDGERS_ROOT}/{ml_name}"


def cursor_path(ml_name: str, cursor_name: str) -> str:
    return f"{MANAGED_LEDGERS_ROOT}/{ml_name}/{cursor_name}"


def owner_path(ml_name: str) -> str:
    return f"{OWNERS_ROOT}/{ml_name}"


def ml_name_from_path(path: str) -> str:
    """The managed-ledger name of a ``/managed-ledgers/...`` path."""
    root = MANAGED_LEDGERS_ROOT + "/"
    if not path.startswith(root):
        raise ValueError(f"{path!r} is not below {MANAGED_LEDGERS_ROOT}")
    return path[len(root) :]
