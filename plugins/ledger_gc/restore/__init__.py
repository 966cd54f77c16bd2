"""``ledgergc restore``: undo a run's deletes (``restoring.restore_run``).

This init imports nothing: import what you use from the module that defines it.
"""
