"""The trim's time, bounded by S3's clock (issue 10 follow-up: a wrong host clock).

Time retention compares each ledger's creation time with *now*. A trim host whose
clock runs days fast finds every consumed ledger "expired" and deletes what retention
keeps; one whose clock is slow stamps ledgers that have no timestamp with a time in the
past, so a later trim with a right clock expires them early. Pulsar's broker trusts its
own clock; a GC running elsewhere must not trust one host alone (as the orphan cycle,
``rules/orphans/timekeeping.py``). So the trim reads S3's clock once (the ``Date`` header of a
``HeadBucket``) and keeps its offset from the host's:

* **deciding** (is a ledger expired?) uses the *earlier* of the two clocks: a clock that
  is wrong either way can only keep data longer;
* **stamping** a ledger that has no timestamp uses the *later* one, for the same reason.

Without S3's time (no ``Date`` header, the request failed) the host's clock is used, as
before. S3's ``Date`` has whole seconds, so the deciding clock may lag by up to one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

log = logging.getLogger(__name__)

Clock = Callable[[], int]


@dataclass(frozen=True)
class TrimClocks:
    """The host's clock and how far S3's is from it (ms; 0: not known)."""

    host: Clock
    server_offset_ms: int = 0

    def decide(self) -> int:
        """Now, for retention: the earlier of the host's and S3's clocks."""
        return self.host() + min(0, self.server_offset_ms)

    def stamp(self) -> int:
        """Now, for a ledger's missing creation time: the later of the two."""
        return self.host() + max(0, self.server_offset_ms)


def s3_time_ms(client: Any, bucket: str) -> int | None:
    """S3's clock (the ``Date`` header of a HeadBucket); None when it gives none."""
    try:
        response = client.head_bucket(Bucket=bucket)
        header = response["ResponseMetadata"]["HTTPHeaders"].get("date")
        return int(parsedate_to_datetime(header).timestamp() * 1000) if header else None
    except Exception as exc:  # no S3 time is no evidence; the host's clock stays
        log.warning("could not read S3's clock (Date header): %s", exc)
        return None


def trim_clocks(host: Clock, client: Any, bucket: str) -> TrimClocks:
    """The run's clocks: the host's, and S3's offset from it read now."""
    before = host()
    server = s3_time_ms(client, bucket)
    if server is None:
        return TrimClocks(host)
    offset = server - (before + host()) // 2
    if abs(offset) > 5 * 60 * 1000:
        log.warning(
            "this host's clock is %.1f minutes %s S3's: fix its time (NTP). The trim "
            "decides retention by the earlier of the two clocks",
            abs(offset) / 60000,
            "ahead of" if offset < 0 else "behind",
        )
    return TrimClocks(host, offset)
