"""Freed memory goes back to the system where a phase of a survey ends (issue 36): at
10M ledgers the driver's heap kept 20 to 30 MiB of freed blocks after each phase (the
cut of the references to the tasks, the results' merge), which glibc returns only when
asked (``malloc_trim``), and every later phase built on top of them."""

from __future__ import annotations

import sys

import pytest

from ledger_gc.memory import release_freed


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap")
def test_the_blocks_a_phase_freed_go_back_to_the_system() -> None:
    blocks = [bytes(2_000) + bytes([n % 256]) for n in range(50_000)]  # ~100 MiB
    kept = blocks[::50]  # (a few kept between them: the heap cannot shrink from its top)
    del blocks
    before = _rss_mib()

    assert release_freed() is True

    assert before - _rss_mib() > 50
    assert len(kept) == 1_000
