"""Every BookKeeper ledger against Pulsar's references (pure): each class, each hold,
foreign and unreadable ledgers, and the properties that keep referenced ledgers alive."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.rules.bookkeeper import classify
from ledger_gc.rules.bookkeeper import classify as c
from ledger_gc.rules.bookkeeper.classify import (
    BkLedger,
    Classifier,
    PulsarReferences,
    PulsarTags,
    SchemaIndex,
    classify_all,
)
from ledger_gc.rules.bookkeeper.records import CLOSED, IN_RECOVERY, OPEN

ML = "t/ns/persistent/orders"
OTHER_ML = "t/ns/persistent/payments"
GONE_ML = "t/ns/persistent/deleted"
ENCODED_ML = "t/ns/persistent/orders+eu"  # the topic "orders eu"
V1_ML = "acme/us-west/persistent/persistent/clicks"  # a v1 namespace called "persistent"


# Pulsar's tag maps (LedgerMetadataUtils), as the record's custom metadata holds them.
def base(component: str, **extra: str) -> dict[str, bytes]:
    tags = {"application": "pulsar", "component": component, **extra}
    return {key: value.encode() for key, value in tags.items()}


def data(ml: str) -> dict[str, bytes]:
    return base("managed-ledger", **{"pulsar/managed-ledger": ml})


def cursor(ml: str, name: str) -> dict[str, bytes]:
    return {**data(ml), "pulsar/cursor": name.encode()}


def schema(schema_id: str) -> dict[str, bytes]:
    return base("schema", **{"pulsar/schemaId": schema_id})


def compacted(topic: str) -> dict[str, bytes]:
    tags = base("compacted-ledger", **{"pulsar/compactedTopic": topic})
    return {**tags, "pulsar/compactedTo": b"\x08\xff"}


def bucket() -> dict[str, bytes]:
    key, topic, sub = "#pulsar.internal.delayed.bucket_10_20", "persistent://t/ns/orders", "b"
    tags = {"delayedIndexBucketKey": key, "delayedIndexTopic": topic, "delayedIndexCursor": sub}
    return base("delayed-index-bucket", **{f"pulsar/{k}": v for k, v in tags.items()})


def ledger(lid: int, custom: dict[str, bytes] | None = None, **kw) -> BkLedger:
    fields = {"state": CLOSED, "length": 1024, "format_version": 3, **kw}
    tags = PulsarTags.of(custom or {})
    return BkLedger(lid, version=2, ctime_ms=1_700_000_000_000, tags=tags, **fields)


REFS = PulsarReferences(
    listed={
        ML: frozenset({10, 11, 20, 30}),
        OTHER_ML: frozenset({100}),
        ENCODED_ML: frozenset({90}),
        V1_ML: frozenset({80}),
    },
    marked={ML: frozenset({5})},
    offloaded_deleted={10: ML, 11: ML},
    cursors={(ML, "billing"): 40, (ML, "audit"): -1, (V1_ML, "sub"): 81},
    compacted={ML: 50},
    buckets=frozenset({60}),
    schemas={
        "t/ns/orders": SchemaIndex(frozenset({70, 71}), 0),
        "t/ns/from-v1": SchemaIndex(frozenset({72}), 1),
        "t/ns/broken": SchemaIndex(frozenset(), None, unreadable="truncated"),
        # a partitioned topic's schema, under its base name: no managed ledger has it
        "t/ns/parted": SchemaIndex(frozenset({73}), 0),
        # a namespace of non-persistent topics: schemas, no managed ledger at all
        "np/only/events": SchemaIndex(frozenset({75}), 0),
    },
    namespaces=frozenset({"t/ns", "acme/us-west/persistent"}),
    schema_namespaces=frozenset({"t/ns", "np/only"}),
)
assert REFS.high() == 100
TOPIC, GONE_TOPIC = "persistent://t/ns/orders", "persistent://t/ns/deleted"
CURSOR_ORPHAN, SCHEMA_ORPHAN = c.BK_ORPHAN_CURSOR_LEDGER, c.BK_ORPHAN_SCHEMA_LEDGER
COMPACTED_ORPHAN = c.BK_ORPHAN_COMPACTED_LEDGER
RECOVERING = {"state": OPEN, "length": 0}

CASES = {
    # live: some record names the id
    "live-listed": (ledger(20, data(ML)), c.BK_LIVE, None),
    "live-listed-open": (ledger(30, data(ML), **RECOVERING), c.BK_LIVE, None),
    "live-marked": (ledger(5, data(ML)), c.BK_LIVE, None),
    "live-cursor-ledger": (ledger(40, cursor(ML, "billing")), c.BK_LIVE, None),
    "live-compaction-property": (ledger(50, compacted(TOPIC)), c.BK_LIVE, None),
    "live-bucket": (ledger(60, bucket()), c.BK_LIVE, None),
    "live-schema-index": (ledger(71, schema("t/ns/orders")), c.BK_LIVE, None),
    "live-untagged-but-listed": (ledger(100, None, format_version=1), c.BK_LIVE, None),
    "live-listed-without-name-tag": (ledger(11, base("managed-ledger")), c.BK_LIVE, None),
    # judged by id
    "offloaded-copy": (ledger(10, data(ML)), c.BK_OFFLOADED_COPY, None),
    # judged by name
    "orphan-ledger": (ledger(15, data(ML)), c.BK_ORPHAN_LEDGER, None),
    "orphan-partition": (ledger(25, data(GONE_ML)), c.BK_ORPHAN_PARTITION, None),
    "orphan-cursor-gone": (ledger(38, cursor(ML, "gone")), CURSOR_ORPHAN, None),
    "orphan-cursor-gone-ml": (ledger(39, cursor(GONE_ML, "b")), CURSOR_ORPHAN, None),
    "orphan-cursor-uses-newer": (ledger(36, cursor(ML, "billing")), CURSOR_ORPHAN, None),
    # a cursor at -1: a ledger older than the managed ledger's newest (30) is a close's
    "orphan-cursor-minus-one": (ledger(29, cursor(ML, "audit")), CURSOR_ORPHAN, None),
    "orphan-schema-unnamed": (ledger(65, schema("t/ns/orders")), SCHEMA_ORPHAN, None),
    "orphan-schema-no-index": (ledger(64, schema("t/ns/none")), SCHEMA_ORPHAN, None),
    "orphan-schema-partitioned": (ledger(74, schema("t/ns/parted")), SCHEMA_ORPHAN, None),
    "orphan-schema-non-persistent-ns": (ledger(76, schema("np/only/events")), SCHEMA_ORPHAN, None),
    "live-schema-partitioned": (ledger(73, schema("t/ns/parted")), c.BK_LIVE, None),
    "live-v1-listed": (ledger(80, data(V1_ML)), c.BK_LIVE, None),
    "live-v1-cursor-ledger": (ledger(81, cursor(V1_ML, "sub")), c.BK_LIVE, None),
    "orphan-compacted-gone-topic": (ledger(45, compacted(GONE_TOPIC)), COMPACTED_ORPHAN, None),
    # held
    "hold-newer": (ledger(101, data(GONE_ML)), c.BK_HELD, c.HOLD_NEWER),
    "hold-newer-open": (ledger(150, data(ML), **RECOVERING), c.BK_HELD, c.HOLD_NEWER),
    "hold-rollover": (ledger(33, data(ML), **RECOVERING), c.BK_HELD, c.HOLD_ROLLOVER),
    "hold-rollover-closed": (ledger(95, data(ENCODED_ML)), c.BK_HELD, c.HOLD_ROLLOVER),
    "hold-cursor-switch": (ledger(41, cursor(ML, "billing")), c.BK_HELD, c.HOLD_CURSOR_SWITCH),
    # a cursor at -1 whose ledger is newer than the managed ledger's newest: its first
    "hold-cursor-first-ledger": (ledger(37, cursor(ML, "audit")), c.BK_HELD, c.HOLD_CURSOR_SWITCH),
    "hold-data-in-schema-only-ns": (
        ledger(77, data("np/only/persistent/x")),
        c.BK_HELD,
        c.HOLD_OTHER_CLUSTER,
    ),
    # acme/us-west is a v1 property/cluster here, not a namespace of a v2 topic
    "hold-v2-name-under-v1-cluster": (
        ledger(79, data("acme/us-west/persistent/x")),
        c.BK_HELD,
        c.HOLD_OTHER_CLUSTER,
    ),
    "hold-other-namespace": (ledger(42, data("o/n/persistent/x")), c.BK_HELD, c.HOLD_OTHER_CLUSTER),
    "hold-other-ns-schema": (ledger(43, schema("o/ns/x")), c.BK_HELD, c.HOLD_OTHER_CLUSTER),
    "hold-live-compacted": (ledger(46, compacted(TOPIC)), c.BK_HELD, c.HOLD_LIVE_COMPACTED),
    "hold-schema-from-v1": (ledger(66, schema("t/ns/from-v1")), c.BK_HELD, c.HOLD_SCHEMA_INDEX),
    "hold-schema-unreadable": (ledger(67, schema("t/ns/broken")), c.BK_HELD, c.HOLD_SCHEMA_INDEX),
    "hold-copy-of-another-ml": (ledger(11, data(OTHER_ML)), c.BK_HELD, c.HOLD_OFFLOAD_MISMATCH),
    # foreign: not a Pulsar ledger ledger-gc judges
    "foreign-untagged": (ledger(12, None), c.BK_FOREIGN, None),
    "foreign-v1-record": (ledger(13, None, format_version=1), c.BK_FOREIGN, None),
    "foreign-other-app": (ledger(14, {**data(ML), "application": b"app"}), c.BK_FOREIGN, None),
    "foreign-app-not-utf8": (ledger(16, {**data(ML), "application": b"\xff"}), c.BK_FOREIGN, None),
    "foreign-bucket": (ledger(61, bucket()), c.BK_FOREIGN, None),
    "foreign-no-component": (ledger(17, {"application": b"pulsar"}), c.BK_FOREIGN, None),
    "foreign-ml-without-name": (ledger(18, base("managed-ledger")), c.BK_FOREIGN, None),
    "foreign-schema-without-id": (ledger(19, base("schema")), c.BK_FOREIGN, None),
    "foreign-compacted-no-topic": (ledger(21, base("compacted-ledger")), c.BK_FOREIGN, None),
    "foreign-invalid-ml-name": (ledger(22, data("orders")), c.BK_FOREIGN, None),
    "foreign-v1-unlisted": (ledger(82, data(V1_ML)), c.BK_FOREIGN, None),
    "foreign-v1-cursor-unnamed": (ledger(83, cursor(V1_ML, "sub")), c.BK_FOREIGN, None),
    "foreign-ml-without-domain": (ledger(23, data("t/ns/orders")), c.BK_FOREIGN, None),
    "foreign-invalid-schema-id": (ledger(24, schema("t/orders")), c.BK_FOREIGN, None),
    "foreign-non-persistent": (ledger(26, compacted("non-" + TOPIC)), c.BK_FOREIGN, None),
    "foreign-short-topic": (ledger(27, compacted("persistent://t/x")), c.BK_FOREIGN, None),
    # unreadable: never judged
    "unreadable": (ledger(28, None, state=None, error="no header"), c.BK_UNREADABLE, None),
    "unreadable-listed": (ledger(20, data(ML), state=None, error="cut"), c.BK_UNREADABLE, None),
}


@pytest.mark.parametrize(("bk", "expected", "hold"), list(CASES.values()), ids=list(CASES))
def test_each_class(bk: BkLedger, expected: str, hold: str | None) -> None:
    verdict = Classifier(REFS).classify(bk)
    assert (verdict.ledger_class, verdict.hold) == (expected, hold), verdict.reason
    assert verdict.reason
    assert verdict.to_dict()["class"] == expected


def test_a_live_topics_compacted_ledger_is_held_whatever_its_name() -> None:
    """Pulsar's ML name is the URL-encoded local name (getPersistenceNamingEncoding), but
    pulsar/compactedTopic is the plain topic name the compactor's reader was given: the
    compacted ledger of the live topic "orders eu" (ML ``orders+eu``) is a live topic's."""
    verdict = Classifier(REFS).classify(ledger(85, compacted("persistent://t/ns/orders eu")))
    assert (verdict.ledger_class, verdict.hold) == (c.BK_HELD, c.HOLD_LIVE_COMPACTED), (
        verdict.reason
    )


def test_owners() -> None:
    classifier = Classifier(REFS)
    assert classifier.classify(CASES["orphan-ledger"][0]).owner == ML
    assert classifier.classify(CASES["orphan-cursor-gone-ml"][0]).owner == GONE_ML
    assert classifier.classify(CASES["orphan-schema-no-index"][0]).owner == "t/ns/none"
    assert classifier.classify(CASES["orphan-compacted-gone-topic"][0]).owner == GONE_ML


def test_with_no_references_every_tagged_ledger_is_newer() -> None:
    refs = PulsarReferences(listed={}, namespaces=frozenset({"t/ns"}))
    verdicts = classify_all([ledger(1, data(GONE_ML)), ledger(2, schema("public/default/x"))], refs)
    assert [(v.ledger_class, v.hold) for _, v in verdicts] == [(c.BK_HELD, c.HOLD_NEWER)] * 2


NAME_JUDGED_CASES = [name for name, (_, cls, _) in CASES.items() if cls in c.BK_NAME_JUDGED]


@pytest.mark.parametrize("name", NAME_JUDGED_CASES)
def test_shared_bookkeeper_holds_every_name_judged_orphan(name: str) -> None:
    bk = CASES[name][0]
    verdict = Classifier(REFS, shared=True).classify(bk)
    assert (verdict.ledger_class, verdict.hold) == (c.BK_HELD, c.HOLD_SHARED)


def test_shared_bookkeeper_still_deletes_offloaded_copies() -> None:
    assert {CASES[name][1] for name in NAME_JUDGED_CASES} == set(c.BK_NAME_JUDGED)
    bk = CASES["offloaded-copy"][0]
    [(_, verdict)] = classify_all([bk], REFS, shared=True)
    assert verdict.ledger_class == c.BK_OFFLOADED_COPY


@pytest.mark.parametrize(
    "name", [n for n, (_, cls, _) in CASES.items() if cls not in c.BK_ORPHAN_CLASSES]
)
def test_shared_changes_nothing_but_orphans(name: str) -> None:
    bk, expected, hold = CASES[name]
    verdict = Classifier(REFS, shared=True).classify(bk)
    assert (verdict.ledger_class, verdict.hold) == (expected, hold)


def test_the_live_recheck_has_no_horizon() -> None:
    refs = PulsarReferences(listed={ML: frozenset({3})}, namespaces=frozenset({"t/ns"}))
    bk = ledger(2, data(ML))
    assert Classifier(refs, horizon=False).classify(bk).ledger_class == c.BK_ORPHAN_LEDGER
    assert Classifier(refs, horizon=False).classify(ledger(9, data(GONE_ML))).ledger_class == (
        c.BK_ORPHAN_PARTITION
    )


def test_bytes_only_once_closed() -> None:
    assert ledger(1, data(ML), length=4096).bytes == 4096
    assert ledger(1, data(ML), state=OPEN, length=4096).bytes == 0


# --- properties ---------------------------------------------------------------------------

MLS = ["a/x/persistent/t1", "a/x/persistent/t2", "b/y/persistent/t3", "c/z/persistent/t4"]
SCHEMA_IDS = ["a/x/t1", "b/y/t3", "c/z/t9"]
NAMESPACES = frozenset({"a/x", "b/y", "c/z"})
ids = st.integers(0, 20)
id_sets = st.frozensets(ids, max_size=3)


mls, cursor_names = st.sampled_from(MLS), st.sampled_from(["s1", "s2"])


@st.composite
def references(draw: st.DrawFn) -> PulsarReferences:
    listed = draw(st.dictionaries(mls, id_sets, max_size=4))
    offloaded = {
        lid: name
        for name, listed_ids in listed.items()
        for lid in draw(st.sets(st.sampled_from(sorted(listed_ids or {0}))))
        if lid in listed_ids
    }
    index = st.builds(SchemaIndex, id_sets, st.sampled_from([None, 0, 0, 1]))
    broken = st.builds(SchemaIndex, id_sets, st.none(), st.just("garbage"))
    return PulsarReferences(
        listed=listed,
        marked=draw(st.dictionaries(mls, id_sets, max_size=2)),
        offloaded_deleted=offloaded,
        cursors=draw(
            st.dictionaries(st.tuples(mls, cursor_names), st.integers(-1, 20), max_size=3)
        ),
        compacted=draw(st.dictionaries(mls, ids, max_size=2)),
        buckets=draw(st.frozensets(ids, max_size=2)),
        schemas=draw(st.dictionaries(st.sampled_from(SCHEMA_IDS), index | broken, max_size=3)),
        namespaces=draw(st.just(NAMESPACES) | st.frozensets(st.sampled_from(sorted(NAMESPACES)))),
    )


def topic_of(ml: str) -> str:
    tenant, ns, _, local = ml.split("/")
    return f"persistent://{tenant}/{ns}/{local}"


custom_metadata = st.one_of(
    mls.map(data),
    st.tuples(mls, st.sampled_from(["s1", "s2", "s3"])).map(lambda t: cursor(*t)),
    st.sampled_from(SCHEMA_IDS).map(schema),
    mls.map(lambda ml: compacted(topic_of(ml))),
    st.just(bucket()),
    st.just({}),
    st.just({"application": b"other"}),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[PulsarReferences, list[BkLedger]]:
    refs = draw(references())
    known = sorted(refs.referenced()) or [0]
    bks = []
    for _ in range(draw(st.integers(0, 10))):
        lid = draw(st.integers(0, 24) | st.integers(0, 24) | st.sampled_from(known))
        owner = refs.offloaded_deleted.get(lid)
        custom = draw(custom_metadata if owner is None else st.just(data(owner)) | custom_metadata)
        error = draw(st.sampled_from([None] * 9 + ["garbage"]))
        state = None if error else draw(st.sampled_from([OPEN, CLOSED, IN_RECOVERY]))
        bks.append(ledger(lid, custom, state=state, error=error))
    return refs, bks


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios(), shared=st.booleans())
def test_referenced_or_new_ledgers_are_never_orphans(
    scenario: tuple[PulsarReferences, list[BkLedger]], shared: bool
) -> None:
    refs, ledgers = scenario
    referenced = refs.referenced()
    high = refs.high()
    for bk, verdict in classify_all(ledgers, refs, shared=shared):
        cls = verdict.ledger_class
        assert cls in c.BK_CLASSES
        assert (cls == c.BK_HELD) == (verdict.hold is not None)
        if cls not in c.BK_ORPHAN_CLASSES:
            continue
        # Only an offloaded copy, which Pulsar lists as bookkeeperDeleted, is judged by id.
        assert bk.ledger_id not in referenced or (
            cls == c.BK_OFFLOADED_COPY and bk.ledger_id in refs.offloaded_deleted
        )
        assert not shared or cls == c.BK_OFFLOADED_COPY
        assert high is not None and bk.ledger_id <= high
        assert bk.error is None


def test_a_live_topic_whose_name_java_encodes_differently_keeps_its_compacted_ledger() -> None:
    """Java's URLEncoder encodes ``~`` (Python's quote does not): the compacted ledger of
    live topic ``prices~eu`` (managed ledger ``prices%7Eeu``) must not look orphaned."""
    refs = classify.PulsarReferences(
        listed={"public/default/persistent/prices%7Eeu": frozenset({1, 9})},
        namespaces=frozenset({"public/default"}),
    )
    tags = {
        "application": b"pulsar",
        "component": b"compacted-ledger",
        "pulsar/compactedTopic": b"persistent://public/default/prices~eu",
    }
    ledger = classify.BkLedger(
        5, 0, 1, state="CLOSED", length=10, tags=classify.PulsarTags.of(tags)
    )
    verdict = classify.Classifier(refs).classify(ledger)
    assert verdict.ledger_class == classify.BK_HELD
    assert verdict.hold == classify.HOLD_LIVE_COMPACTED


def test_a_topic_spelled_another_way_is_never_judged_gone() -> None:
    refs = classify.PulsarReferences(
        listed={"public/default/persistent/a+b": frozenset({1, 9})},
        namespaces=frozenset({"public/default"}),
    )
    tags = {
        "application": b"pulsar",
        "component": b"managed-ledger",
        "pulsar/managed-ledger": b"public/default/persistent/a%20b",
    }
    ledger = classify.BkLedger(
        5, 0, 1, state="CLOSED", length=10, tags=classify.PulsarTags.of(tags)
    )
    verdict = classify.Classifier(refs).classify(ledger)
    assert (verdict.ledger_class, verdict.hold) == (classify.BK_HELD, classify.HOLD_NAME_SPELLING)


def test_a_schema_id_is_the_encoded_local_name() -> None:
    assert classify.schema_ml_name("t/ns/orders+eu") == "t/ns/persistent/orders+eu"
    assert classify.compacted_ml_name("persistent://t/ns/orders eu~x") == (
        "t/ns/persistent/orders+eu%7Ex"
    )


# --- schemas are judged by their locator, -1 cursors by the managed ledger's newest --------


def test_a_schema_with_a_locator_is_not_a_gone_topic_whatever_the_managed_ledgers() -> None:
    """The shared-BookKeeper rule counts a gone topic's ledgers (``gone_topic``). A
    partitioned topic's schema (``t/ns/parted``, no managed ledger) whose locator
    exists is this cluster's; one without a locator or a managed ledger counts."""
    classifier = Classifier(REFS)
    assert classifier.gone_topic(PulsarTags.of(schema("t/ns/parted"))) is None
    assert classifier.gone_topic(PulsarTags.of(schema("np/only/events"))) is None
    assert classifier.gone_topic(PulsarTags.of(schema("t/ns/orders"))) is None
    assert classifier.gone_topic(PulsarTags.of(schema("t/ns/none"))) == "t/ns/persistent/none"
    assert classifier.gone_topic(PulsarTags.of(data(ML))) is None
    assert classifier.gone_topic(PulsarTags.of(data(GONE_ML))) == GONE_ML
    assert classifier.gone_topic(PulsarTags.of(cursor(GONE_ML, "s"))) == GONE_ML
    assert classifier.gone_topic(PulsarTags.of(data(V1_ML))) is None  # v1: never judged


def test_a_v1_ledger_no_record_names_is_foreign_and_says_why() -> None:
    verdict = Classifier(REFS).classify(ledger(82, data(V1_ML)))
    assert verdict.ledger_class == c.BK_FOREIGN and "v1" in verdict.reason


def test_the_live_recheck_holds_a_minus_one_cursors_first_ledger_too() -> None:
    """The delete's re-check has no horizon (``horizon=False``): the first cursor ledger
    of a cursor still at -1 is held by the managed ledger's newest ledger alone."""
    refs = PulsarReferences(
        listed={ML: frozenset({3, 4})},
        cursors={(ML, "sub"): -1},
        namespaces=frozenset({"t/ns"}),
    )
    live = Classifier(refs, horizon=False)
    first = live.classify(ledger(9, cursor(ML, "sub")))
    assert (first.ledger_class, first.hold) == (c.BK_HELD, c.HOLD_CURSOR_SWITCH)
    left = live.classify(ledger(2, cursor(ML, "sub")))
    assert left.ledger_class == c.BK_ORPHAN_CURSOR_LEDGER and "close" in left.reason
    empty = PulsarReferences(
        listed={ML: frozenset()}, cursors={(ML, "sub"): -1}, namespaces=frozenset({"t/ns"})
    )
    unknown = Classifier(empty, horizon=False).classify(ledger(2, cursor(ML, "sub")))
    assert (unknown.ledger_class, unknown.hold) == (c.BK_HELD, c.HOLD_CURSOR_SWITCH)


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios(), shared=st.booleans())
def test_a_schema_ledger_is_judged_by_its_locator_not_by_a_managed_ledger(
    scenario: tuple[PulsarReferences, list[BkLedger]], shared: bool
) -> None:
    """Adding the managed ledger a schema id maps to (with no ledgers) never changes how a
    schema ledger is classed (a partitioned or non-persistent topic's schema has none)."""
    refs, ledgers = scenario
    for bk in ledgers:
        if bk.tags.component != c.SCHEMA_COMPONENT or bk.error is not None:
            continue
        name = c.schema_ml_name(bk.tags.schema_id or "")
        assert name is not None
        if name in refs.listed:
            continue
        with_ml = PulsarReferences(
            **{**refs.__dict__, "listed": {**refs.listed, name: frozenset()}}
        )
        verdicts = {
            (v.ledger_class, v.hold)
            for r in (refs, with_ml)
            for v in [Classifier(r, shared=shared, horizon=False).classify(bk)]
        }
        assert len(verdicts) == 1, (bk, verdicts)


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios())
def test_a_minus_one_cursors_ledger_is_orphaned_only_below_the_newest_ledger(
    scenario: tuple[PulsarReferences, list[BkLedger]],
) -> None:
    refs, ledgers = scenario
    classifier = Classifier(refs, horizon=False)
    for bk in ledgers:
        tags = bk.tags
        if tags.cursor is None or tags.ml_name is None:
            continue
        if refs.cursors.get((tags.ml_name, tags.cursor)) != -1:
            continue
        verdict = classifier.classify(bk)
        if verdict.ledger_class == c.BK_ORPHAN_CURSOR_LEDGER:
            high = refs.ml_high(tags.ml_name)
            assert high is not None and bk.ledger_id < high


# --- ledgers handed off by the Pulsar-metadata source ----------------------------------------

GONE_NS_ML = "o/n/persistent/x"  # a namespace this metadata no longer has
HANDED = {
    42: c.HandedOff(GONE_NS_ML, f"/managed-ledgers/{GONE_NS_ML}"),
    43: c.HandedOff("o/ns/x", "/schemas/o/ns/x"),
    44: c.HandedOff(GONE_NS_ML, f"/managed-ledgers/{GONE_NS_ML}/sub"),
    47: c.HandedOff(GONE_NS_ML, f"/managed-ledgers/{GONE_NS_ML}/__compaction"),
    101: c.HandedOff(GONE_ML, f"/managed-ledgers/{GONE_ML}"),
    # a hand-off naming another owner than the ledger's tags: not used
    48: c.HandedOff("o/n/persistent/other", "/managed-ledgers/o/n/persistent/other"),
    20: c.HandedOff(ML, f"/managed-ledgers/{ML}"),
}
HANDOFF_CASES = {
    "partition": (ledger(42, data(GONE_NS_ML)), c.BK_ORPHAN_PARTITION, None),
    "schema": (ledger(43, schema("o/ns/x")), c.BK_ORPHAN_SCHEMA_LEDGER, None),
    "cursor": (ledger(44, cursor(GONE_NS_ML, "sub")), c.BK_ORPHAN_CURSOR_LEDGER, None),
    "compacted": (ledger(47, compacted("persistent://o/n/x")), COMPACTED_ORPHAN, None),
    # named by this metadata, so not newer than it, whatever the horizon says
    "above-the-horizon": (ledger(101, data(GONE_ML)), c.BK_ORPHAN_PARTITION, None),
    "owner-mismatch": (ledger(48, data(GONE_NS_ML)), c.BK_HELD, c.HOLD_OTHER_CLUSTER),
    # referenced again (the record restored): live, the hand-off notwithstanding
    "referenced-again": (ledger(20, data(ML)), c.BK_LIVE, None),
    "untagged": (ledger(42, None), c.BK_FOREIGN, None),
}


@pytest.mark.parametrize(
    ("bk", "expected", "hold"), list(HANDOFF_CASES.values()), ids=list(HANDOFF_CASES)
)
def test_handed_off_ledgers_are_judged_by_their_tags_without_the_namespace_hold(
    bk: BkLedger, expected: str, hold: str | None
) -> None:
    verdict = Classifier(REFS, handed_off=HANDED).classify(bk)
    assert (verdict.ledger_class, verdict.hold) == (expected, hold), verdict.reason
    if expected in c.BK_ORPHAN_CLASSES:
        assert HANDED[bk.ledger_id].named_by in verdict.reason


def test_without_the_hand_off_the_same_ledgers_are_held() -> None:
    classifier = Classifier(REFS)
    holds = [classifier.classify(HANDOFF_CASES[k][0]).hold for k in ("partition", "schema")]
    assert holds == [c.HOLD_OTHER_CLUSTER, c.HOLD_OTHER_CLUSTER]
    assert classifier.classify(HANDOFF_CASES["above-the-horizon"][0]).hold == c.HOLD_NEWER


def test_a_shared_bookkeeper_still_holds_handed_off_ledgers() -> None:
    verdict = Classifier(REFS, shared=True, handed_off=HANDED).classify(
        HANDOFF_CASES["partition"][0]
    )
    assert (verdict.ledger_class, verdict.hold) == (c.BK_HELD, c.HOLD_SHARED)


def test_a_handed_off_ledger_gets_the_same_verdict_in_the_live_recheck() -> None:
    """The live re-check reads only the ledger's owner's records (``horizon=False``):
    same class and owner as the survey's."""
    bk = HANDOFF_CASES["cursor"][0]
    live = PulsarReferences(listed={}, namespaces=frozenset())
    survey = Classifier(REFS, handed_off=HANDED).classify(bk)
    recheck = Classifier(live, horizon=False, handed_off=HANDED).classify(bk)
    assert (recheck.ledger_class, recheck.owner) == (survey.ledger_class, survey.owner)


# --- namespaces the Pulsar-metadata source removed -------------------------------------------

# Namespaces whose leftover znodes this cluster's Pulsar-metadata source removed: "o/n"
# (managed ledgers), "o/ns" (a schema), and "t/ns", which this metadata has again.
REMOVED = frozenset({"o/n", "o/ns", "t/ns"})
REMOVED_CASES = {
    "partition": (ledger(42, data(GONE_NS_ML)), c.BK_ORPHAN_PARTITION, None),
    "schema": (ledger(43, schema("o/ns/x")), c.BK_ORPHAN_SCHEMA_LEDGER, None),
    "cursor": (ledger(44, cursor(GONE_NS_ML, "sub")), c.BK_ORPHAN_CURSOR_LEDGER, None),
    "compacted": (ledger(47, compacted("persistent://o/n/x")), COMPACTED_ORPHAN, None),
    # no record names it, so the horizon applies: newer than the metadata read
    "above-the-horizon": (ledger(101, data(GONE_NS_ML)), c.BK_HELD, c.HOLD_NEWER),
    # a namespace no record of this cluster had: another cluster's still
    "another-namespace": (ledger(45, data("q/r/persistent/x")), c.BK_HELD, c.HOLD_OTHER_CLUSTER),
    "another-ns-schema": (ledger(46, schema("q/r/x")), c.BK_HELD, c.HOLD_OTHER_CLUSTER),
    # re-created: a namespace this metadata has, judged as such
    "recreated-orphan-ledger": (ledger(15, data(ML)), c.BK_ORPHAN_LEDGER, None),
    "recreated-live": (ledger(20, data(ML)), c.BK_LIVE, None),
    "recreated-live-compacted": (ledger(85, compacted(TOPIC)), c.BK_HELD, c.HOLD_LIVE_COMPACTED),
    "v1-name": (ledger(86, data("o/n/ns/persistent/x")), c.BK_FOREIGN, None),
    "untagged": (ledger(42, None), c.BK_FOREIGN, None),
}


@pytest.mark.parametrize(
    ("bk", "expected", "hold"), list(REMOVED_CASES.values()), ids=list(REMOVED_CASES)
)
def test_a_removed_namespace_is_this_clusters_for_the_unknown_namespace_hold(
    bk: BkLedger, expected: str, hold: str | None
) -> None:
    verdict = Classifier(REFS, removed_namespaces=REMOVED).classify(bk)
    assert (verdict.ledger_class, verdict.hold) == (expected, hold), verdict.reason
    namespace = c.namespace_of(verdict.owner)
    if expected in c.BK_ORPHAN_CLASSES and namespace not in REFS.namespaces:
        assert f"namespace {namespace} was this cluster's" in verdict.reason


def test_without_the_record_a_removed_namespace_is_held_as_unknown() -> None:
    classifier = Classifier(REFS)
    for key in ("partition", "schema", "cursor", "compacted"):
        verdict = classifier.classify(REMOVED_CASES[key][0])
        assert (verdict.ledger_class, verdict.hold) == (c.BK_HELD, c.HOLD_OTHER_CLUSTER), key


def test_a_shared_bookkeeper_holds_the_ledgers_of_a_removed_namespace() -> None:
    classifier = Classifier(REFS, shared=True, removed_namespaces=REMOVED)
    for key in ("partition", "schema", "cursor", "compacted"):
        verdict = classifier.classify(REMOVED_CASES[key][0])
        assert (verdict.ledger_class, verdict.hold) == (c.BK_HELD, c.HOLD_SHARED), key


def test_a_removed_namespaces_ledger_gets_the_same_verdict_in_the_live_recheck() -> None:
    """The live re-check reads only the ledger's owner's records (``horizon=False``; its
    namespace is gone from them too): same class and owner as the survey's."""
    live = PulsarReferences(listed={}, namespaces=frozenset())
    for key in ("partition", "schema", "cursor", "compacted"):
        bk = REMOVED_CASES[key][0]
        survey = Classifier(REFS, removed_namespaces=REMOVED).classify(bk)
        recheck = Classifier(live, horizon=False, removed_namespaces=REMOVED).classify(bk)
        assert (recheck.ledger_class, recheck.owner) == (survey.ledger_class, survey.owner), key
        assert recheck.candidate


# --- unreadable records and LEDGERGC_BK_REMOVE_UNREADABLE ------------------------------------


def unreadable(lid: int) -> BkLedger:
    return ledger(lid, None, state=None, error="empty record")


#: The references with every schema locator readable (REFS has a broken one, which may
#: name any unreadable ledger: see the test after the next).
READABLE_REFS = dataclasses.replace(
    REFS, schemas={k: v for k, v in REFS.schemas.items() if v.unreadable is None}
)


@pytest.mark.parametrize(
    ("lid", "kwargs", "removable", "why"),
    [
        (28, {}, False, "LEDGERGC_BK_REMOVE_UNREADABLE=true would remove it"),
        (28, {"remove_unreadable": True}, True, "no Pulsar record names it"),
        (20, {"remove_unreadable": True}, False, "listed by"),  # named: never deleted
        (60, {"remove_unreadable": True}, False, "bucket"),  # a bucket property names it
        (28, {"remove_unreadable": True, "shared": True}, False, "LEDGERGC_BK_SHARED"),
        (101, {"remove_unreadable": True}, False, "newer"),
        (101, {"remove_unreadable": True, "horizon": False}, True, "no Pulsar record"),
    ],
)
def test_an_unreadable_record_is_removable_only_when_asked_and_unnamed(
    lid: int, kwargs: dict[str, bool], removable: bool, why: str
) -> None:
    verdict = Classifier(READABLE_REFS, **kwargs).classify(unreadable(lid))
    assert verdict.ledger_class == c.BK_UNREADABLE
    assert (verdict.removable, verdict.candidate) == (removable, removable), verdict.reason
    assert why in verdict.reason
    assert verdict.hold is None


def test_an_unreadable_record_is_never_removable_while_a_schema_locator_does_not_decode() -> None:
    for horizon in (True, False):
        verdict = Classifier(REFS, remove_unreadable=True, horizon=horizon).classify(unreadable(28))
        assert not verdict.removable and not verdict.candidate
        assert "schema locator t/ns/broken does not decode" in verdict.reason


def test_by_default_the_reason_names_the_auditor() -> None:
    verdict = Classifier(REFS).classify(unreadable(28))
    assert "auditor" in verdict.reason and "13480" in verdict.reason
    assert c.BK_UNREADABLE in c.BK_TARGET_CLASSES and c.BK_UNREADABLE not in c.BK_ORPHAN_CLASSES
