"""BookKeeper ledgers: where a real Pulsar cluster keeps its data (DESIGN.md "BookKeeper
ledgers").

A BookKeeper ledger's metadata is one znode; deleting the ledger *is* removing that
znode (BookKeeper's ``LedgerDeleteOp``), and the bookies drop its data at their next
garbage collection. This package reads those znodes, judges each ledger against the
Pulsar records that reference it, and re-checks and removes the orphans, as one more
source of the orphan engine (``ledger_gc.orphans``):

* ``ledger_paths``: ledger id <-> znode path in the flat and hierarchical layouts (pure);
* ``records``: the metadata record of format versions 1, 2 and 3 (pure);
* ``classify``: each ledger against Pulsar's references, into DESIGN.md's classes (pure);
* ``scan``: the layout, the listing and the records, read from ZooKeeper;
* ``references``: Pulsar's records that reference ledgers (cursors, schemas, namespaces);
* ``deleting``: the live re-check and the delete of exactly one leaf znode.
"""
