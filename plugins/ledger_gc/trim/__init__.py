"""Mark-then-delete trim of consumed ledgers (issue 3; Pulsar PIP-129's design).

* ``eligibility``: which ledgers may go (Pulsar's broker rules; pure);
* ``trimmer``: read, decide, mark and move cursors, per managed ledger (ZooKeeper);
* ``purge``: delete marked ledgers' data after a last look at the cursors (S3);
* ``states``, ``steps``: a managed ledger as read with its versions; one managed
  ledger's step, whose failure is its own;
* ``report``: what a run planned and did (``TrimReport``), and the run summary;
* ``run``: ``run_trim`` over a ``TrimScope``, the entry point of the CLI, the DAG tasks
  and the demo;
* ``lock``: the trim lock; ``clocks``: retention on the servers' clocks.

This init imports nothing: importing one module of the trim must not import all of it.
"""
