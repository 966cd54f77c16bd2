"""Mark-then-delete trim of consumed ledgers (issue 3; Pulsar PIP-129's design).

* ``eligibility``: which ledgers may go (Pulsar's broker rules; pure);
* ``trimmer``: read, decide, mark and move cursors, per managed ledger (ZooKeeper);
* ``purge``: delete marked ledgers' data after a last look at the cursors (S3);
* ``states``, ``steps``: a managed ledger as read with its versions; one managed
  ledger's step, whose failure is its own;
* ``report``: what a run planned and did, and the run summary;
* ``run``: ``run_trim``, the entry point of the CLI, the DAG tasks and the demo;
* ``command``: ``ledgergc trim``.
"""

from ledger_gc.trim.report import TrimReport
from ledger_gc.trim.run import TrimScope, run_trim

__all__ = ["TrimReport", "TrimScope", "run_trim"]
