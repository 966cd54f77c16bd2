"""spark-submit entry point of the orphan cycle's diff step (ledger_gc.orphans).

Diff: classify every object (live, marked, orphan ledger, orphan partition, foreign) and
aggregate per target and namespace.

    LEDGERGC_...=... spark-submit --master local[*] spark_apps/orphan_diff.py --run-id RUN

Settings come from the LEDGERGC_* variables; outputs go to
<state_dir>/orphans/runs/<run>/ (see ledger_gc.orphans.layout).
"""

import sys

from ledgergc_app import main

if __name__ == "__main__":
    sys.exit(main("diff"))
