"""spark-submit entry point of the orphan cycle's scan step (ledger_gc.orphans).

Storage scan: every object under the prefix, listed by namespace on executors, or an S3
Inventory report (--inventory PATH).

    LEDGERGC_...=... spark-submit --master local[*] spark_apps/orphan_scan.py --run-id RUN

Settings come from the LEDGERGC_* variables; outputs go to
<state_dir>/orphans/runs/<run>/ (see ledger_gc.orphans.layout).
"""

import sys

from ledgergc_app import main

if __name__ == "__main__":
    sys.exit(main("scan"))
