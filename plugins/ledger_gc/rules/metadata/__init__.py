"""Pure rules of ``ledger_gc.metadata`` (see ``ledger_gc.rules``)."""
