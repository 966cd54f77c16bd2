"""Pure rules of ``ledger_gc.bookkeeper`` (see ``ledger_gc.rules``)."""
