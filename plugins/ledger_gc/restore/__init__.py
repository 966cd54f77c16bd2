"""``ledgergc restore``: undo a run's deletes in a versioned bucket (``restoring``)."""

from ledger_gc.restore.restoring import RestoreReport, restore_run

__all__ = ["RestoreReport", "restore_run"]
