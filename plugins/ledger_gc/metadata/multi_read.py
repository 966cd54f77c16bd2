"""Batched znode reads with ZooKeeper's ``multiRead`` (opcode 22, ZooKeeper 3.6+).

Why: kazoo's connection thread sends one request and reads one response per loop turn
(a ``select`` and a dozen Python calls each), so pipelining ``get_async`` calls saves
the network round trip but not that per-call CPU, which dominates on loopback or a fast
LAN: pipelined gets ran no faster than sequential ones (bench/snapshot.py). A
``multiRead`` request carries many ``getData``/``getChildren`` operations and its answer
comes back as one packet, so the per-call cost is paid once per batch.

``multiRead`` is a read like any other: not atomic (each operation succeeds or fails on
its own, e.g. NoNode for a znode deleted meanwhile), served by the server the session
is on, checked against each znode's ACL. A server older than 3.6 answers UNIMPLEMENTED;
``MetadataStore`` then falls back to pipelined single calls for that session.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import (
    GetChildren,
    GetData,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
)
from kazoo.protocol.states import ZnodeStat

#: ZooKeeper's OpCode.multiRead.
MULTI_READ = 22
#: Operations per multiRead request: one answer then stays well under a megabyte for
#: typical ManagedLedgerInfo records.
OPS_PER_REQUEST = 128
#: multiRead requests in flight at once on the session.
REQUESTS_IN_FLIGHT = 8
_ERROR = -1


class MultiRead(namedtuple("MultiRead", "operations")):
    """The multiRead request in kazoo's request protocol (``type``, ``serialize``,
    ``deserialize``), so that it goes through the session like kazoo's own requests."""

    type = MULTI_READ

    def serialize(self) -> bytearray:
        body = bytearray()
        for op in self.operations:
            body += multiheader_struct.pack(op.type, False, -1)
            body += op.serialize()
        body += multiheader_struct.pack(-1, True, -1)
        return body

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        """One result per operation: (data, ZnodeStat), a list of children, or the
        KazooException instance of an operation that failed."""
        results: list[Any] = []
        while True:
            op_type, done, _ = multiheader_struct.unpack_from(buffer, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if op_type == GetData.type:
                data, offset = read_buffer(buffer, offset)
                results.append((data, ZnodeStat._make(stat_struct.unpack_from(buffer, offset))))
                offset += stat_struct.size
            elif op_type == GetChildren.type:
                count = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(buffer, offset)
                    children.append(child)
                results.append(children)
            elif op_type == _ERROR:
                code = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"multiRead answer has an operation of type {op_type}")


def read_many(
    client: KazooClient,
    znodes: Sequence[str],
    op: type,
    timeout: float,
    *,
    before_request: Callable[[int], None] | None = None,
    per_request: int | None = None,
) -> list[Any]:
    """``op`` (GetData or GetChildren) of every znode, in order, in pipelined multiReads.

    Per-znode failures are returned as exception instances (the caller decides what a
    missing znode means); a failure of a whole request (session trouble, UNIMPLEMENTED)
    raises. ``before_request(n)`` is called before each request of ``n`` reads is sent
    (the read budget waits there), and ``per_request`` caps its operations.
    """
    chroot = client.chroot or ""
    results: list[Any] = []
    size = max(1, min(OPS_PER_REQUEST, per_request or OPS_PER_REQUEST))
    batches = [znodes[start : start + size] for start in range(0, len(znodes), size)]
    for window_start in range(0, len(batches), REQUESTS_IN_FLIGHT):
        pending = []
        for batch in batches[window_start : window_start + REQUESTS_IN_FLIGHT]:
            if before_request is not None:
                before_request(len(batch))
            request = MultiRead(
                [op(chroot + path if path != "/" else chroot or "/", None) for path in batch]
            )
            answer = client.handler.async_result()
            client._call(request, answer)
            pending.append((len(batch), answer))
        for expected, answer in pending:
            got = answer.get(timeout=timeout)
            if len(got) != expected:
                raise ValueError(f"multiRead answered {len(got)} results for {expected} reads")
            results.extend(got)
    return results
