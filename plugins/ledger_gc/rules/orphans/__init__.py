"""Pure rules of ``ledger_gc.orphans`` (see ``ledger_gc.rules``)."""
