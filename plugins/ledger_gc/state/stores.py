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

from ledger_gc.state.legacy_import import forget_done, import_state_dir_once, legacy_files
from ledger_gc.state.store import StateMissingError, StateStore
from ledger_gc.state.url import default_state_url

if TYPE_CHECKING:
    from ledger_gc.config.endpoints import StateEndpoint
    from ledger_gc.config.settings import Settings
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
    store, state_dir = _store_of(location)
    if state_dir is not None:
        ensure_state(store, state_dir)
    return store


def existing_store(location: StateLocation) -> StateStore:
    """The store of a command that only reads it (``status``, ``audit``, ``orphans
    --list``, ``restore``): one a ledger-gc run has written, else ``StateMissingError``.

    Opening a store creates it (the writing commands' first run does so on purpose),
    so a mistyped ``LEDGERGC_STATE_DIR`` used to read as a new, empty store: "no audit
    records match", exit 0. A state dir holding an older ledger-gc's files counts as a
    store (they are imported on opening)."""
    if isinstance(location, StateStore):
        store, state_dir = location, location.state_dir
    else:
        store, state_dir = _store_of(location)
    if store.exists() or (state_dir is not None and legacy_files(state_dir)):
        return open_store(location)
    if store.sqlite_file is None:
        why, fix = "its database has no ledger-gc tables", "check LEDGERGC_STATE_URL"
    elif state_dir is not None and store.url == default_state_url(state_dir):
        why = f"LEDGERGC_STATE_DIR={state_dir} has no {store.sqlite_file.name}"
        fix = "check LEDGERGC_STATE_DIR (or LEDGERGC_STATE_URL)"
    else:
        why, fix = f"no file {store.sqlite_file}", "check LEDGERGC_STATE_URL"
    raise StateMissingError(
        f"the state store {store.display_url} does not exist ({why}): no ledger-gc run has "
        f"written there, nothing was read; {fix}. A first `ledgergc trim` or `ledgergc "
        "orphans` run (or DAG run) creates it"
    )


def _store_of(
    location: StateEndpoint | Settings | Path | str,
) -> tuple[StateStore, Path | None]:
    """The process's store of a location, and the location's state dir (None for a
    URL); creates nothing (no file, no connection)."""
    state_dir: Path | None
    if isinstance(location, str) and "://" in location:
        state_dir, url = None, location
    elif isinstance(location, str | os.PathLike):
        state_dir = Path(location)
        url = default_state_url(state_dir)
    else:  # a state endpoint or settings (read by attribute: the state layer sits below)
        state_dir = Path(location.state_dir)
        url = location.state_url or default_state_url(state_dir)
    key = (os.getpid(), url)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = StateStore(url, state_dir=state_dir)
    return store, state_dir


def ensure_state(store: StateStore, state_dir: Path) -> None:
    """Bring ``store`` up to date with ``state_dir``: its old files imported, a one-time
    step recorded in the store (later opens read the record, not the dir)."""
    import_state_dir_once(store, state_dir)


def forget_stores() -> None:
    """Dispose of every store this process opened, and forget the imports it saw done
    (tests that move files under them, or play a new process)."""
    with _stores_lock:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.dispose()
    forget_done()
