"""Pure rules of ``ledger_gc.trim`` (see ``ledger_gc.rules``)."""
