"""The S3 source's reads and deletes: what its Spark jobs run on executors.

* ``reading``: one shard of the metadata snapshot (managed-ledger records read from
  ZooKeeper) and one shard of a bucket's listing;
* ``cluster_tags``: the Pulsar cluster named by an offloaded segment's objects (a HEAD);
* ``deleting``: the live re-check and the delete of registry entries (blocks and
  segments), audited ahead.

The orphan engine (``ledger_gc.orphans``: ``s3_source``, ``survey_steps``) and the Spark
jobs (``ledger_gc.spark``) both import these, so they sit below both: nothing here
imports the engine, the jobs or the state store's registry and step records. Importing
one module of this package imports no other.
"""
