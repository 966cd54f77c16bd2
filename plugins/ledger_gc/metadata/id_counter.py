"""The chroot's ledger-id counter, read without drawing an id.

Evidence for two sources' guards: the S3 blocks' horizon (``rules/orphans/horizon.py``:
orphans newer than the counter are held) and BookKeeper's stale-metadata check (ledger
ids at or above it). Its own module, in the metadata layer, so both read it alike.
"""

from __future__ import annotations

from ledger_gc.config.endpoints import ZkEndpoint
from ledger_gc.errors import MetadataAccessError
from ledger_gc.metadata import zk_access
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.metadata.zk_client import guarded
from ledger_gc.rules.metadata import paths

#: A parent of our own on which ``read_id_counter`` learns how this ZooKeeper numbers
#: sequential children (below the chroot, beside the other ledger-gc znodes).
SEQUENCE_PROBE_PATH = "/ledger-gc/sequence-probe"


def next_sequence(cversion: int, children: int, *, deletes_advance: bool) -> int:
    """The sequence number a parent's next sequential child gets (pure).

    ``cversion`` counts every change to the children, creates and deletes. ZooKeeper
    numbers a sequential child either by the parent's ``cversion`` (deletes advance
    the sequence) or by the creates alone (``cversion`` less the deletes, i.e.
    ``(cversion + children) / 2``), depending on the server's version.
    """
    return cversion if deletes_advance else (cversion + children) // 2


def read_id_counter(endpoint: ZkEndpoint) -> int | None:
    """The chroot's ledger-id counter: the next id ``/ledgers/idgen`` would hand out.

    Read without drawing an id: drawing one would move the counter past the very
    evidence it is read for (a stale replica's counter would creep up each cycle). The
    parent's stat gives ``cversion`` and its child count; how they map to the next id
    is learnt once per session on a parent of our own (``SEQUENCE_PROBE_PATH``: create,
    delete, create, delete). Every id allocated so far is below the result. None when
    the chroot has no id generator (its ids come from elsewhere): then only the managed
    ledgers' own lists are evidence (horizon.py).
    """
    what = f"reading the ledger-id counter {paths.LEDGER_IDGEN_PATH}"
    with MetadataStore.open(endpoint) as store:
        client = store.client

        def read() -> int | None:
            client.sync("/")
            seqs = []
            for _ in range(2):
                made = client.create(f"{SEQUENCE_PROBE_PATH}/n-", b"", sequence=True, makepath=True)
                client.delete(made)
                seqs.append(int(made.rsplit("-", 1)[1]))
            store.reading(1)
            stat = client.exists(paths.LEDGER_IDGEN_PATH)
            if stat is None:
                return None
            return next_sequence(
                stat.cversion, stat.numChildren, deletes_advance=seqs[1] - seqs[0] > 1
            )

        def refused() -> MetadataAccessError:
            # Its one create is on ledger-gc's own probe parent.
            return zk_access.own_refusal(
                client,
                store.hosts,
                what=f"{what} (a probe under {SEQUENCE_PROBE_PATH})",
                znode=SEQUENCE_PROBE_PATH,
                names=endpoint.names,
            )

        return guarded(what, store.hosts, read, refused=refused)
