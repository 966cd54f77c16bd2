"""What a Spark session costs the driver's Python process: a cycle's driver holds the
survey's listing and references for the whole cycle, so what the session imports stays
beside them (issue 36: the driver's peak at 10M, and the same on a cluster as alone)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

_DRIVER = """
import json, resource, sys
import numpy as np
from ledger_gc.spark.session import local_session

spark = local_session("driver-memory", master="local[1]")
jvm = spark.sparkContext._jvm
count = spark.sparkContext.parallelize(range(10), 2).map(lambda x: x * 2).sum()
print(json.dumps({
    "pandas": "pandas" in sys.modules,
    "pyarrow": "pyarrow" in sys.modules,
    "sum": count,
    "array": jvm.java.util.Arrays.toString(np.array([7, 8], dtype=np.int64)),
    "scalar": jvm.java.lang.String.valueOf(np.int64(9)),
    "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
}))
spark.stop()
"""


def test_a_session_leaves_pandas_and_pyarrow_out_of_the_driver() -> None:
    """PySpark's numpy converters import ``pyspark.testing.utils`` to ask whether numpy
    is there, and it imports pandas and pyarrow (84 MiB of a bare driver's 115 MiB) at
    the first call into the JVM. ledger-gc's jobs pass no DataFrame to pandas: its
    drivers ask for numpy only when a numpy object is passed, and still pass one."""
    # (its JVM's options are the suite's: tests/conftest.py sets SPARK_SUBMIT_OPTS)
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["sum"] == 90
    assert got["array"] == "[7, 8]" and got["scalar"] == "9"  # numpy still converts
    assert not got["pandas"] and not got["pyarrow"], got
