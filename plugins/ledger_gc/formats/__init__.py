"""The bytes of Pulsar's managed-ledger metadata, by job:

* ``framing``: Pulsar's optional compression frame around a record, and its codecs.
* ``records``: ``ManagedLedgerInfo`` / ``ManagedCursorInfo`` decoded and encoded (strictly:
  a record that does not decode is an error, never an empty record), and their properties.
* ``markers``: the trim's deletable markers in ``ManagedLedgerInfo.properties``.

Import what you use from the module that defines it.
"""
