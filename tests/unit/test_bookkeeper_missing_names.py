"""How ``bk-missing`` names its topics (``bookkeeper.survey.topic_name``) and how a
wrong-root refusal lists them (``guards.bookkeeper_refusals``), pure."""

from __future__ import annotations

from typing import Any

from ledger_gc.bookkeeper.survey import topic_name
from ledger_gc.rules.orphans import guards


def test_topic_names_of_managed_ledgers() -> None:
    assert topic_name("t/ns/persistent/orders+eu") == "persistent://t/ns/orders eu"
    assert topic_name("p/c/ns/persistent/x%2Fy") == "persistent://p/c/ns/x/y"
    # a v2 namespace called "persistent": its topic, not the namespace
    assert topic_name("t/persistent/persistent/x") == "persistent://t/persistent/x"
    assert topic_name("t/ns/orders") == "t/ns/orders"  # a schema id stays as it is


def survey(samples: list[dict[str, Any]], count: int) -> dict[str, Any]:
    return {
        "hosts": "zk:2181",
        "root": "/ledgers",
        "managed_ledgers": 1,
        "pulsar_ledgers": 1,
        "missing_listed": [{"ml_name": "t/ns/persistent/a", "ledger_id": 1}],
        "listed_in_bookkeeper": 0,
        "classes": {"bk-live": {"ledgers": 0}},
        "bk_missing": {"count": count, "samples": samples},
    }


def test_a_wrong_root_refusal_names_the_missing_topics_and_ledgers() -> None:
    samples = [
        {"topic": "persistent://t/ns/a", "ledger_id": lid, "named_by": "/managed-ledgers/x"}
        for lid in range(1, 8)
    ] + [{"topic": "t/ns/a", "ledger_id": 9, "named_by": "/schemas/t/ns/a"}]
    refusals = guards.bookkeeper_refusals(survey(samples, 8), 1.0, force=False)
    reason = next(r.reason for r in refusals if r.guard == guards.BK_ROOT_MISMATCH)
    assert "records name 8 ledgers it lacks" in reason
    assert "persistent://t/ns/a: ledgers 1, 2, 3, 4, 5 and 2 more" in reason
    assert "t/ns/a: ledger 9" in reason


def test_without_samples_the_refusal_reads_as_before() -> None:
    refusals = guards.bookkeeper_refusals(survey([], 0), 1.0, force=False)
    reason = next(r.reason for r in refusals if r.guard == guards.BK_ROOT_MISMATCH)
    assert "bk-missing" not in reason and "re-read live): is LEDGERGC_BK_ZK_HOSTS" in reason
