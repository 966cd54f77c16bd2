"""Run one orphan cycle's delete step in this process, and freeze the whole process
(SIGSTOP: every thread, kazoo's pings included, as a long GC pause or a suspended VM
would) right after the write-ahead audit record of its first ZooKeeper delete (a BookKeeper
ledger's or a Pulsar-metadata znode's), i.e. with that delete about to be sent.

Used by ``test_delete_lock_lost.py`` as ``python frozen_delete.py RUN_ID OFFSET_MS
SESSION_FILE`` with the run's settings in the environment. Before it freezes it writes
its delete lock's session (id and password, hex) to SESSION_FILE, so that the test can
expire exactly that session on the server, as ZooKeeper does to a client it stops
hearing from, while the process sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from ledger_gc.audit import DELETING, AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle, delete_lock
from ledger_gc.orphans.witness import ServerClocks
from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_CLASSES
from ledger_gc.rules.pulsar_metadata.classes import PM_ORPHAN_CLASSES

#: The deletes it freezes before: a BookKeeper ledger's or a Pulsar-metadata znode's.
FROZEN_ON = (*BK_ORPHAN_CLASSES, *PM_ORPHAN_CLASSES)


def main(run_id: str, offset_ms: int, session_file: str) -> int:
    real_acquire = delete_lock.DeleteLock.acquire
    real_append = AuditLog.append

    def acquire(self: delete_lock.DeleteLock, wait_seconds: float) -> bool:
        got = real_acquire(self, wait_seconds)
        session_id, password = self._client.client_id
        with open(session_file, "w") as out:
            json.dump([session_id, password.hex()], out)
        return got

    def append(self: AuditLog, records: Any) -> int:
        records = list(records)
        written = real_append(self, records)
        if any(r.status == DELETING and r.target_class in FROZEN_ON for r in records):
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen here until the test sends SIGCONT
        return written

    delete_lock.DeleteLock.acquire = acquire  # type: ignore[method-assign]
    AuditLog.append = append  # type: ignore[method-assign]
    try:
        record = cycle.step_delete(
            resolve(Settings.from_env()),
            run_id,
            clock=lambda: int(time.time() * 1000) + offset_ms,
            witness=ServerClocks(offset_ms=offset_ms),
        )
    except Exception as exc:  # the test reads what happened from stdout
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return 1
    print(json.dumps({"actions": [r.action for r in record.results]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
