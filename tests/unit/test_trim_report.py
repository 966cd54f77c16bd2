"""The trim's report, run summary, scope and DAG sharding (pure, no servers)."""

from __future__ import annotations

import pytest

from ledger_gc.airflow.trim_tasks import TrimRunFailedError, check_outcome, shard
from ledger_gc.errors import ConfigError
from ledger_gc.rules.trim.eligibility import TrimRetention
from ledger_gc.trim.report import (
    DeletedLedger,
    ManagedLedgerTrim,
    MarkerState,
    PlannedLedger,
    TrimReport,
    run_summary,
)
from ledger_gc.trim.run import TrimScope

RETENTION = TrimRetention(0, 0)


def ml(name: str, **fields) -> ManagedLedgerTrim:
    return ManagedLedgerTrim(name, RETENTION, **fields)


def report(*mls: ManagedLedgerTrim, error: str | None = None) -> TrimReport:
    return TrimReport("run-1", False, "all", 1_000, 5_000, list(mls), error)


def test_exit_codes_say_done_pending_or_error():
    idle = ml("a/b/persistent/idle")
    pending = ml("a/b/persistent/p", pending=[MarkerState(7, 10, 1, 0, 2, "SlowDown")])
    failed = ml("a/b/persistent/f", error="record corrupt")
    assert report(idle).exit_code == 0
    assert report(idle, pending).exit_code == 1
    assert report(pending, failed).exit_code == 2
    assert report(idle, error="ZooKeeper lost").exit_code == 2


def test_the_report_dict_has_plan_result_and_totals():
    busy = ml(
        "a/b/persistent/busy",
        to_mark=[PlannedLedger(3, 10, 100, 0, "consumed, expired")],
        already_marked=[MarkerState(1, 50, 5, 500)],
        marked=[3],
        deleted=[DeletedLedger(1, 1, 60), DeletedLedger(3, 2, 110)],
        zk_writes=2,
    )
    data = report(busy, ml("a/b/persistent/idle")).to_dict(include_idle=False)

    assert [m["name"] for m in data["managed_ledgers"]] == ["a/b/persistent/busy"]
    [shown] = data["managed_ledgers"]
    assert shown["plan"]["already_marked"][0]["age_seconds"] == 4.5  # finished_at - 500 ms
    totals = data["totals"]
    assert totals["managed_ledgers"] == 2 and totals["managed_ledgers_trimmed"] == 1
    assert (totals["ledgers_planned"], totals["bytes_planned"]) == (1, 100)
    assert (totals["ledgers_deleted"], totals["bytes_reclaimed"]) == (2, 170)
    assert data["outcome"] == "ok" and data["exit_code"] == 0


def test_a_run_summary_adds_shards_up():
    one = report(
        ml("a/b/persistent/x", deleted=[DeletedLedger(1, 1, 10)]),
        ml("a/b/persistent/y", pending=[MarkerState(4, 40, 4, 300, 3, "AccessDenied")]),
    ).to_dict()
    two = report(
        ml("a/c/persistent/z", pending=[MarkerState(9, 90, 9, 200, 1, "SlowDown")]),
        ml("a/c/persistent/w", error="boom"),
    ).to_dict()

    summary = run_summary(
        [one, two],
        run_id="r",
        source="airflow",
        dry_run=False,
        scope="all",
        started_at=1_000,
        finished_at=3_500,
        run_errors=["1 of 3 trim shards failed"],
    )

    assert summary["totals"]["managed_ledgers"] == 4
    assert summary["totals"]["markers_pending"] == 2 and summary["totals"]["bytes_pending"] == 130
    assert summary["totals"]["oldest_pending_marked_at"] == 200
    assert [p["ledger_id"] for p in summary["pending"]] == [9, 4]  # oldest first
    assert summary["pending"][0]["ml"] == "a/c/persistent/z"
    assert {e["error"] for e in summary["errors"]} == {"1 of 3 trim shards failed", "boom"}
    assert summary["outcome"] == "error" and summary["exit_code"] == 2
    assert summary["duration_seconds"] == 2.5


def test_an_empty_run_summary_is_ok():
    summary = run_summary(
        [], run_id="r", source="cli", dry_run=True, scope="all", started_at=0, finished_at=0
    )
    assert summary["outcome"] == "ok" and summary["totals"]["managed_ledgers"] == 0


def test_check_outcome_fails_a_run_that_left_work_undone():
    data = report(
        ml("a/b/persistent/p", pending=[MarkerState(4, 40, 4, 300, 3, "AccessDenied")])
    ).to_dict()
    summary = run_summary(
        [data],
        run_id="r",
        source="airflow",
        dry_run=False,
        scope="all",
        started_at=0,
        finished_at=1,
    )
    with pytest.raises(TrimRunFailedError, match="ledger 4 still marked after 3 attempts"):
        check_outcome(summary)
    check_outcome(
        run_summary(
            [],
            run_id="r",
            source="airflow",
            dry_run=False,
            scope="all",
            started_at=0,
            finished_at=1,
        )
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", TrimScope()),
        ("all", TrimScope()),
        ("acme/prod", TrimScope(namespace="acme/prod")),
        ("/acme/prod/", TrimScope(namespace="acme/prod")),
        ("acme/prod/persistent/t", TrimScope(ml_names=("acme/prod/persistent/t",))),
    ],
)
def test_scopes_parse_from_text(text, expected):
    assert TrimScope.parse(text) == expected


@pytest.mark.parametrize(
    "bad",
    [
        {"namespace": "acme"},
        {"namespace": "acme/prod/x"},
        {"ml_names": ("acme/prod",)},
        {"ml_names": ("a/b/persistent/t",), "namespace": "a/b"},
    ],
)
def test_a_bad_scope_is_a_config_error_that_says_the_form(bad):
    with pytest.raises(ConfigError, match=r"tenant/namespace|acme/prod/persistent/orders|not both"):
        TrimScope(**bad)


@pytest.mark.parametrize(
    ("count", "max_shards", "sizes"),
    [
        (0, 8, []),
        (3, 8, [3]),
        (100, 8, [25, 25, 25, 25]),
        (1001, 8, [126, 125, 125, 125, 125, 125, 125, 125]),
        (1001, 1, [1001]),
    ],
)
def test_shards_are_contiguous_bounded_and_cover_every_name(count, max_shards, sizes):
    names = [f"t/ns{i // 10:03d}/persistent/{i:04d}" for i in range(count)]
    shards = shard(list(reversed(names)), max_shards)
    assert [len(s) for s in shards] == sizes
    assert [n for s in shards for n in s] == names
