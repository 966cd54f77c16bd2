"""spark-submit entry point of the orphan cycle's delete step (ledger_gc.orphans).

Deletion phase: live re-check (ZooKeeper sync) and bulk delete of registered orphans
past grace and retention, over executors when many; reads the registry and records its
result in the state store (LEDGERGC_STATE_URL).

    LEDGERGC_...=... spark-submit --master local[*] --py-files ledger_gc.zip \\
        spark_apps/orphan_delete.py --run-id RUN [--dry-run] [--force]

ledger_gc comes with --py-files (the DAG builds the zip: ledger_gc.spark.library_zip).
"""

import sys

from ledger_gc.orphans.apps import DELETE, run_app

if __name__ == "__main__":
    sys.exit(run_app(DELETE))
