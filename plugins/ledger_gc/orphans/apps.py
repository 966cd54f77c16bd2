"""What the ``spark_apps/orphan_*.py`` entry points run under ``spark-submit``.

Two applications per cycle: ``survey`` (snapshot, scan and diff: one JVM, its Parquet
outputs scratch of its own) and ``delete`` (phase 3, over executors when many entries
are due). Both read and write only the state store (``run_steps``, the registry, the
audit log), so they may run on any worker. Settings come from ``LEDGERGC_*`` variables
(``Settings.from_env``; the DAG's operator passes them as spark-submit's environment);
``ledger_gc`` itself comes with spark-submit's ``py_files``. The app prints its result as
JSON and exits 0, or prints one error line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from ledger_gc.config.secret_masking import install_secret_masking
from ledger_gc.config.secret_values import install_for
from ledger_gc.config.settings import Settings
from ledger_gc.errors import LedgerGcError
from ledger_gc.termination import stop_on_signals

SURVEY = "survey"
DELETE = "delete"
STEPS = (SURVEY, DELETE)


def _optional(value: str | None) -> str | None:
    """An empty argument is no argument (a DAG template renders an unset param as '')."""
    return value or None


def build_parser(step: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"orphan_{step}.py", description=f"The {step} step of a ledger-gc orphan cycle."
    )
    parser.add_argument("--run-id", required=True, help="the cycle's run id")
    if step == SURVEY:
        parser.add_argument(
            "--inventory", type=_optional, help="an S3 Inventory report instead of listing"
        )
        parser.add_argument(
            "--offload-inventory", type=_optional, help="an S3 Inventory of the offload bucket"
        )
    if step == DELETE:
        parser.add_argument("--dry-run", action="store_true", help="re-check, delete nothing")
        parser.add_argument("--force", action="store_true", help="recorded in the result")
    return parser


def run_app(step: str, argv: Sequence[str] | None = None) -> int:
    """Run one step in a SparkSession from ``spark-submit`` (its master, its config)."""
    if step not in STEPS:
        raise ValueError(f"unknown step {step!r}; one of {', '.join(STEPS)}")
    args = build_parser(step).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    install_secret_masking()  # every logger's records, py4j's and kazoo's included
    from pyspark.sql import SparkSession

    from ledger_gc.config.edge import resolve
    from ledger_gc.orphans import cycle
    from ledger_gc.spark import py4j_converters
    from ledger_gc.spark.session import configure_session

    py4j_converters.lean()
    spark = SparkSession.builder.appName(f"ledgergc-orphans-{step}").getOrCreate()
    try:
        configure_session(spark)
        settings = Settings.from_env()
        install_for(settings)
        endpoints = resolve(settings)  # the edge of a spark-submit'ed step
        if step == SURVEY:
            result = cycle.step_survey(
                endpoints,
                args.run_id,
                spark,
                inventory=args.inventory,
                offload_inventory=args.offload_inventory,
            )
        else:
            options = cycle.CycleOptions(dry_run=args.dry_run or None, force=args.force)
            # SIGTERM (a pod eviction, a task timeout that reaches the driver): the delete
            # batch under way finishes and is audited, nothing new starts. A SIGKILL still
            # leaves every batch it interrupted announced in the audit log beforehand.
            with stop_on_signals():
                deleted = cycle.step_delete(endpoints, args.run_id, options=options, spark=spark)
            result = deleted.summary()
        json.dump(result, sys.stdout, indent=1, sort_keys=True, default=str)
        sys.stdout.write("\n")
        return 0
    except LedgerGcError as exc:
        print(f"ledgergc orphans {step}: error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
