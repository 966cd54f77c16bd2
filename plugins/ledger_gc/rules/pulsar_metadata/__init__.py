"""Pure rules of ``ledger_gc.pulsar_metadata`` (see ``ledger_gc.rules``)."""
