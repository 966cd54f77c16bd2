"""Pure rules of ``ledger_gc.ledger`` (see ``ledger_gc.rules``)."""
