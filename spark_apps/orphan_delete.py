"""spark-submit entry point of the orphan cycle's delete step (ledger_gc.orphans).

Deletion phase: live re-check (ZooKeeper sync) and bulk delete of registered orphans
past grace and retention, over executors when many.

    LEDGERGC_...=... spark-submit --master local[*] spark_apps/orphan_delete.py --run-id RUN

Settings come from the LEDGERGC_* variables; outputs go to
<state_dir>/orphans/runs/<run>/ (see ledger_gc.orphans.layout).
"""

import sys

from ledgergc_app import main

if __name__ == "__main__":
    sys.exit(main("delete"))
