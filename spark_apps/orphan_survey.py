"""spark-submit entry point of the orphan cycle's survey (ledger_gc.orphans).

One Spark application per cycle: the metadata snapshot (every managed ledger, its ledger
ids and markers, read by executors in shards), the storage scan (every object under the
prefix, listed by namespace on executors, or an S3 Inventory report: --inventory PATH;
the offload bucket too with tiered storage on) and the diff (classify and aggregate).
Their Parquet outputs are this app's scratch; what the later steps need goes to the
state store (LEDGERGC_STATE_URL).

    LEDGERGC_...=... spark-submit --master local[*] --py-files ledger_gc.zip \\
        spark_apps/orphan_survey.py --run-id RUN

ledger_gc comes with --py-files (the DAG builds the zip: ledger_gc.spark.library_zip).
"""

import sys

from ledger_gc.orphans.apps import SURVEY, run_app

if __name__ == "__main__":
    sys.exit(run_app(SURVEY))
