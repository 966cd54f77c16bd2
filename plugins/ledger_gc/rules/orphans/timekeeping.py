"""Time an orphan cycle can trust (pure; issue 11, item 2).

A host's clock can be wrong: two days slow during one cycle made orphans look first seen
two days ago, and the next cycle deleted them a minute later; ten days fast made every
later cycle refuse as "stale-run" for ten days. So no decision rests on the host's clock:

* **Elapsed time** (the grace window) is measured on each server clock between two
  observations: ZooKeeper's (the ``ctime`` of a znode the cycle creates) and S3's (the
  ``Date`` header of a response). The grace window counts the *least* of them, so a
  clock that jumps forward in between cannot hasten a deletion; a constant offset of a
  server clock cancels out. A server clock observed at only one end does not count, and
  with no server clock at both ends no time has passed (deletion waits).
* **Now**, for retention (an object's age is ``now - LastModified``, S3's own clock), is
  the earliest of the servers' clocks: a slow one only delays.
* **Order of runs** is a ZooKeeper sequence number (``witness.py``), never a time.

The host's clock is only compared with the servers' and a large difference is reported
(``clock_warnings``), so an operator learns that the host needs NTP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: A host clock further than this from the servers' is worth a warning.
CLOCK_TOLERANCE_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class Instant:
    """One moment as each clock read it (epoch ms; None: that server was not read)."""

    host_ms: int
    zk_ms: int | None = None
    s3_ms: int | None = None

    def servers(self) -> dict[str, int]:
        return {
            name: value
            for name, value in (("ZooKeeper", self.zk_ms), ("S3", self.s3_ms))
            if value is not None
        }

    def now_ms(self) -> int:
        """The earliest server clock (the host's only if no server was read)."""
        return min(self.servers().values(), default=self.host_ms)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Instant | None:
        if not data or data.get("host_ms") is None:
            return None
        return cls(int(data["host_ms"]), data.get("zk_ms"), data.get("s3_ms"))


def elapsed_ms(start: Instant, end: Instant) -> int:
    """Time between two instants that every server clock read at both agrees has passed
    (the least of them; 0 when no server clock was read at both ends)."""
    spans = [
        end_ms - start_ms
        for name, start_ms in start.servers().items()
        if (end_ms := end.servers().get(name)) is not None
    ]
    return max(0, min(spans)) if spans else 0


def grace_start(first_scan: int, last_scan: int, instants: Mapping[int, Instant]) -> Instant | None:
    """The instant an entry's grace window runs from: that of the first scan that saw it,
    or, for a scan recorded without one (an older ledger-gc), the next scan that has one
    (later, so only ever shorter). None: no scan of it has an instant."""
    for number in range(first_scan, last_scan + 1):
        if number in instants:
            return instants[number]
    return None


def grace_elapsed(
    entries: Iterable[Any], instants: Mapping[int, Instant], now: Instant
) -> dict[str, int]:
    """Elapsed grace per registry entry prefix (``elapsed_ms`` from ``grace_start``)."""
    clock = GraceClock(instants, now)
    return {entry.prefix: clock(entry) for entry in entries}


def entry_grace_elapsed(entry: Any, instants: Mapping[int, Instant], now: Instant) -> int:
    """Elapsed grace of one registry entry (``grace_elapsed``'s value for its prefix), for
    a reader that walks the registry without keeping a value per entry (the report)."""
    start = grace_start(entry.first_scan, entry.last_scan, instants)
    return 0 if start is None else elapsed_ms(start, now)


class GraceClock:
    """``entry_grace_elapsed`` for a walk of the whole registry: an entry's grace time
    depends on its first and last scans alone, and a registry of 500,000 entries has a
    few dozen pairs of them, so each pair is worked out once."""

    def __init__(self, instants: Mapping[int, Instant], now: Instant) -> None:
        self._instants = instants
        self._now = now
        self._elapsed: dict[tuple[int, int], int] = {}

    def __call__(self, entry: Any) -> int:
        scans = (entry.first_scan, entry.last_scan)
        elapsed = self._elapsed.get(scans)
        if elapsed is None:
            elapsed = self._elapsed[scans] = entry_grace_elapsed(entry, self._instants, self._now)
        return elapsed


def _span(ms: int) -> str:
    seconds = abs(ms) / 1000
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes"


def clock_warnings(instant: Instant, tolerance_ms: int = CLOCK_TOLERANCE_MS) -> list[str]:
    """What an operator should hear about the clocks at ``instant`` (empty: they agree)."""
    warnings = []
    servers = instant.servers()
    for name, value in servers.items():
        delta = instant.host_ms - value
        if abs(delta) > tolerance_ms:
            where = "ahead of" if delta > 0 else "behind"
            warnings.append(
                f"this host's clock is {_span(delta)} {where} {name}'s: fix its time "
                "(NTP). Grace, retention and the order of runs use the servers' clocks and "
                "a ZooKeeper sequence, so this only affects the times shown in reports"
            )
    if len(servers) == 2 and abs(servers["ZooKeeper"] - servers["S3"]) > tolerance_ms:
        delta = servers["ZooKeeper"] - servers["S3"]
        warnings.append(
            f"ZooKeeper's and S3's clocks differ by {_span(delta)}; the grace window counts "
            "the lesser time each measured and retention the earlier clock, so deletion "
            "may come later than configured"
        )
    return warnings
