"""One ``StateStore`` per URL per process, opened and brought up to date.

Opening is two explicit steps: the store of the URL (created once per process, the schema
migrated on its first use) and ``ensure_state``, which imports a state dir's files of an
older ledger-gc the first time (``legacy_import``). They live here, above ``store`` and
``legacy_import``, so that neither of those imports the other.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ledger_gc.state.legacy_import import import_state_dir_once
from ledger_gc.state.store import StateStore
from ledger_gc.state.url import default_state_url

if TYPE_CHECKING:
    from ledger_gc.state.store import StateLocation

_stores: dict[tuple[int, str], StateStore] = {}
_stores_lock = threading.Lock()


def open_store(location: StateLocation) -> StateStore:
    """The store a location names (see ``StateLocation``), shared within this process.

    Given settings or a state dir, ``ensure_state`` imports the dir's files of an older
    ledger-gc (JSON lines and the registry's SQLite) into the store the first time.
    """
    if isinstance(location, StateStore):
        return location
    state_dir: Path | None
    if isinstance(location, str) and "://" in location:
        state_dir, url = None, location
    elif isinstance(location, str | os.PathLike):
        state_dir = Path(location)
        url = default_state_url(state_dir)
    else:  # settings (read by attribute: the state layer sits below the settings)
        state_dir = Path(location.state_dir)
        url = location.state_url or default_state_url(state_dir)
    key = (os.getpid(), url)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = StateStore(url, state_dir=state_dir)
    if state_dir is not None:
        ensure_state(store, state_dir)
    return store


def ensure_state(store: StateStore, state_dir: Path) -> None:
    """Bring ``store`` up to date with ``state_dir``: its old files imported, once."""
    import_state_dir_once(store, state_dir)


def forget_stores() -> None:
    """Dispose of every store this process opened (tests that move files under them)."""
    with _stores_lock:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.dispose()
