"""Every managed-ledger name Pulsar produces, through a whole orphan cycle (issue 10 item
4 asks for trim *and* orphans): live data under such a name is never an orphan, a leak
under it is found, and only the leak goes. A name parsed differently on the metadata and
the storage side would make a live topic's whole prefix look like an orphan partition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.rules.storage.keys import block_key, ledger_dir

pytestmark = pytest.mark.spark

NAMES = [
    "public/default/persistent/orders+%2B+refunds",
    "t=1:x/ns.2/persistent/a+b*c",
    "acme/prod/persistent/%E4%BD%A0%E5%A5%BD",
    "acme/prod/persistent/.hidden.-_x",
]


def test_live_topics_with_pulsar_names_are_not_orphans_and_their_leaks_go(
    settings: Settings, store_kit: Any, spark: Any, later: Callable[[float], Any]
) -> None:
    enabled = settings.with_overrides(
        delete_enabled=True, grace_seconds=3600, retention_seconds=0, orphan_max_fraction=1.0
    )
    ids = {name: store_kit.managed_ledger(name, entries=10, size=1000) for name in NAMES}
    live = store_kit.keys()
    # A legacy delete's leak in the last topic: a ledger id its store allocated earlier.
    leaked = ids[NAMES[0]][0]
    leak_dir = ledger_dir(store_kit.storage.prefix, NAMES[-1], leaked)
    store_kit.put(block_key(store_kit.storage.prefix, NAMES[-1], leaked, 0), b"x" * 100)

    first = run_orphan_cycle(resolve(enabled), spark=spark).to_dict()
    second = run_orphan_cycle(resolve(enabled), spark=spark, **later(2)).to_dict()

    assert first["status"] == "ok", first
    assert first["phases"]["new"]["count"] == 1, first["waiting"]
    assert [d["prefix"] for d in second["deleted"]] == [leak_dir]
    assert store_kit.keys() == live
