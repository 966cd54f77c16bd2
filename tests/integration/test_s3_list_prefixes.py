"""``LedgerStorage.list_prefixes``: many directories listed in few requests, and exactly
what one listing per directory returns.

The trim lists every marked managed ledger's ``ledgers/`` directory before its deletes
and again to confirm them (``deletion.Deleter._still_listed``); a key missed here is a
block reported gone while it is still there. So each case compares with the plain
per-prefix listing, on names whose byte order and SeaweedFS's tree order disagree.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ledger_gc.config.edge import block_store
from ledger_gc.config.settings import Settings
from ledger_gc.storage.s3 import LedgerStorage

# Topic names that sort around "t" differently in byte order ('-' '.' '%' '+' < '/') and
# in SeaweedFS's directory-tree order.
TOPICS = ["t", "t-b", "t.c", "t%2F", "t+", "tb", "t-partition-1"]


def _put(client: Any, bucket: str, keys: list[str]) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=b"x"), keys))


def _counting(settings: Settings) -> tuple[LedgerStorage, Counter[str]]:
    storage = LedgerStorage(block_store(settings))
    calls: Counter[str] = Counter()
    storage.client.meta.events.register(
        "before-call.s3", lambda model, **_: calls.update([model.name])
    )
    return storage, calls


def _per_prefix(storage: LedgerStorage, prefixes: list[str]) -> dict[str, list[str]]:
    return {p: sorted(o.key for o in storage.iter_objects(p)) for p in prefixes}


def _keys_of(listed: dict[str, Any]) -> dict[str, list[str]]:
    return {p: sorted(o.key for o in objects) for p, objects in listed.items()}


def test_a_namespace_of_small_topics_is_listed_in_one_request_and_matches(
    settings: Settings, s3_client: Any
) -> None:
    base = "ledgers/acme/ns/persistent"
    keys = [f"{base}/{t}/ledgers/{i:020d}/{0:020d}.blk" for t in TOPICS for i in (1, 2)]
    keys += [f"{base}/{t}/other" for t in TOPICS]  # beside ledgers/: never listed as ours
    keys += ["ledgers/acme/ns/persistent-x/t/ledgers/1", "ledgers/acme/ns2/persistent/t/x"]
    _put(s3_client, settings.bucket, keys)
    prefixes = [f"{base}/{t}/ledgers/" for t in TOPICS if t != "tb"]  # one topic not asked
    storage, calls = _counting(settings)

    listed = storage.list_prefixes(prefixes)

    assert calls["ListObjectsV2"] == 1
    assert _keys_of(listed) == _per_prefix(storage, prefixes)
    assert all(len(objects) == 2 for objects in listed.values())


def test_a_parent_holding_more_than_its_budget_falls_back_to_one_listing_per_prefix(
    settings: Settings, s3_client: Any
) -> None:
    """Two topics asked, a third (not asked) holds 1,500 keys: the parent's listing stops
    after its one-page budget and each prefix is listed on its own."""
    base = "ledgers/acme/ns/persistent"
    keys = [f"{base}/big/ledgers/{i:020d}/{0:020d}.blk" for i in range(1500)]
    keys += [f"{base}/{t}/ledgers/{1:020d}/{0:020d}.blk" for t in ("a", "z")]
    _put(s3_client, settings.bucket, keys)
    prefixes = [f"{base}/a/ledgers/", f"{base}/z/ledgers/"]
    storage, calls = _counting(settings)

    listed = storage.list_prefixes(prefixes)

    assert calls["ListObjectsV2"] == 1 + 2
    assert _keys_of(listed) == _per_prefix(storage, prefixes)
    assert [len(v) for v in listed.values()] == [1, 1]


def test_prefixes_in_many_namespaces_nested_prefixes_and_key_prefixes(
    settings: Settings, s3_client: Any
) -> None:
    """Groups of several namespaces at once; a prefix nested in another gets its keys
    too; a prefix that is not a directory (an offloaded segment's name) is listed alone."""
    keys = [
        f"ledgers/acme/ns{n}/persistent/{t}/ledgers/{i:020d}/{0:020d}.blk"
        for n in range(5)
        for t in TOPICS
        for i in (7, 8)
    ]
    keys += ["offload/uuid-ledger-7", "offload/uuid-ledger-7-index", "offload/uuid-ledger-70"]
    _put(s3_client, settings.bucket, keys)
    prefixes = [f"ledgers/acme/ns{n}/persistent/{t}/ledgers/" for n in range(5) for t in TOPICS]
    prefixes += [
        f"ledgers/acme/ns0/persistent/t/ledgers/{7:020d}/",
        "offload/uuid-ledger-7",
        "ledgers/acme/ns9/persistent/none/ledgers/",
    ]
    storage, _ = _counting(settings)

    listed = storage.list_prefixes(prefixes, workers=3)

    assert _keys_of(listed) == _per_prefix(storage, prefixes)
    assert listed["offload/uuid-ledger-7"]
    assert not listed["ledgers/acme/ns9/persistent/none/ledgers/"]
