#!/usr/bin/env python3
"""Figure 9g: two steps of the BookKeeper survey's driver at 10M ledgers (100,000 topics
of 100 ledgers, 95 listed each), in one process, no ZooKeeper: the references cut to
40 Spark tasks' parts (``Classifier.cuts``), and the check of every listed ledger
against the ledgers found (``FoundIds.lacking_each``), each beside the simple way a user
would write it, in the same run:

* the cut's baseline: for each part, every record's ids cut to the part by bisection
  and the part's index built from them (``LedgerIndex.build``), a record at a time;
* the check's baseline: each managed ledger's ids asked of the ids found in turn
  (``FoundIds.lacking``, numpy within each topic).

``--ids blocks`` gives each topic 100 ids together; ``--ids counter`` hands them out
from one counter, every topic rolling over in turn, as Pulsar's brokers do: then each
topic's ledgers lie in 95 leaf directories and reach into every part. Each step's time
and, for the cuts, its peak of traced memory (``tracemalloc``, a second pass: tracing
slows Python's small allocations more than numpy's) are printed; the last line is JSON.

    .venv/bin/python bench/bk_driver_steps.py [--topics 100000] [--ids counter] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from _common import fmt_s, ratio, report, say  # (first: the library's path)

from ledger_gc.bookkeeper.id_spill import IdSpill
from ledger_gc.rules.bookkeeper.classify import Classifier, PulsarReferences
from ledger_gc.rules.bookkeeper.ledger_index import FoundIds, LeafIds, LedgerIds, LedgerIndex

PER_ML = 100
LISTED = 95
PART_LEDGERS = 250_000  # (``bookkeeper.survey.PART_LEDGERS``)
LEAF = 10_000
QUICK_TOPICS = 5_000


def references(topics: int, ids: str) -> PulsarReferences:
    """Every topic's listed ids and one cursor, as the survey's references hold them
    (the listed ids in a spill file: ``bookkeeper/id_spill.py``)."""
    spill = IdSpill()
    listed = {}
    cursors = {}
    sub = sys.intern("sub")
    for t in range(topics):
        name = sys.intern(f"bench/ns/persistent/t-{t:06d}")
        if ids == "counter":
            listed[name] = spill.add(LedgerIds(range(t, topics * LISTED, topics)))
        else:
            listed[name] = spill.add(LedgerIds(range(t * PER_ML, t * PER_ML + LISTED)))
        cursors[(name, sub)] = -1
    return PulsarReferences(listed=listed, cursors=cursors, namespaces=frozenset(["bench/ns"]))


def naive_cuts(refs: PulsarReferences, parts: list[list[tuple[int, int]]]) -> Iterator[Any]:
    """Each part's two indexes, every record's ids cut to the part by bisection."""
    for spans in parts:

        def cut(groups: Iterator[tuple[str, Any]], spans: list[tuple[int, int]] = spans) -> Any:
            for label, ids in groups:
                values = ids.sorted_array() if isinstance(ids, LedgerIds) else array("q", ids)
                mine = array("q")
                for low, high in spans:
                    mine.extend(values[bisect_left(values, low) : bisect_left(values, high)])
                if mine:
                    yield label, mine

        yield (
            LedgerIndex.build(cut(refs.reference_groups())),
            LedgerIndex.build(
                cut((name, refs.listed[name]) for name in reversed(list(refs.listed)))
            ),
        )


def timed(step: Callable[[], Any], traced: bool) -> tuple[float, float | None]:
    """Seconds of one pass, then (``traced``) the peak MiB of traced memory of another."""
    gc.collect()
    started = time.perf_counter()
    step()
    seconds = time.perf_counter() - started
    if not traced:
        return seconds, None
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    step()
    peak = (tracemalloc.get_traced_memory()[1] - base) / 2**20
    tracemalloc.stop()
    return seconds, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--ids", choices=("blocks", "counter"), default="counter")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TOPICS:,} topics")
    args = parser.parse_args()
    topics = QUICK_TOPICS if args.quick else args.topics
    if topics < 1:
        print("bk_driver_steps.py: --topics must be at least 1", file=sys.stderr)
        return 2
    size = topics * PER_ML
    refs = references(topics, args.ids)
    count = max(1, size // PART_LEDGERS)
    parts = [[(p * size // count, (p + 1) * size // count)] for p in range(count)]
    found = FoundIds(
        LeafIds.of(array("q", range(low, min(low + LEAF, size)))) for low in range(0, size, LEAF)
    )
    say(f"{size:,} ledgers of {topics:,} topics, ids in {args.ids}; {count} parts")

    def ours_cut() -> None:
        cuts = Classifier(refs).cuts(parts)
        for _ in parts:
            next(cuts)  # (let go at once, as the survey's driver packs and hands it on)

    def naive_cut() -> None:
        for _ in naive_cuts(refs, parts):
            pass

    def ours_check() -> None:
        for _ in found.lacking_each(refs.listed.items()):
            pass

    def naive_check() -> None:
        for ids in refs.listed.values():
            found.lacking(ids)

    results: dict[str, dict[str, float | None]] = {}
    for name, step in (
        ("cut", ours_cut),
        ("cut_baseline", naive_cut),
        ("check", ours_check),
        ("check_baseline", naive_check),
    ):
        # (the check's memory is a chunk's; traced, its baseline's numpy calls take minutes)
        seconds, peak = timed(step, traced=name.startswith("cut"))
        results[name] = {"seconds": round(seconds, 3), "peak_mib": peak and round(peak, 1)}
        memory = "" if peak is None else f"   peak {peak:6.1f} MiB traced"
        say(f"  {name:<15} {seconds:8.2f} s{memory}")
    rows = []
    targets = []
    for step in ("cut", "check"):
        ours = float(results[step]["seconds"] or 0)
        baseline = float(results[f"{step}_baseline"]["seconds"] or 0)
        rows.append((step, fmt_s(ours), fmt_s(baseline), f"{ratio(baseline, ours):.1f}x"))
        if topics >= 100_000:  # (at the size; a few parts favour the baseline)
            targets.append((f"{step} faster than its baseline", ours < baseline))
    report(
        "bk_driver_steps",
        rows,
        targets,
        {"quick": args.quick, "ids": args.ids, "topics": topics, "items": size, "steps": results},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
