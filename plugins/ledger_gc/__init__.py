"""ledger-gc: keep a managed-ledger log store (ZooKeeper metadata, S3 data) from leaking."""

__version__ = "0.1.0"
