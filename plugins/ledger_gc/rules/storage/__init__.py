"""Pure rules of ``ledger_gc.storage`` (see ``ledger_gc.rules``)."""
