"""spark-submit entry point of the orphan cycle's snapshot step (ledger_gc.orphans).

Metadata snapshot: every managed ledger, its ledger ids and markers, read by executors
in shards (pipelined kazoo reads).

    LEDGERGC_...=... spark-submit --master local[*] spark_apps/orphan_snapshot.py --run-id RUN

Settings come from the LEDGERGC_* variables; outputs go to
<state_dir>/orphans/runs/<run>/ (see ledger_gc.orphans.layout).
"""

import sys

from ledgergc_app import main

if __name__ == "__main__":
    sys.exit(main("snapshot"))
