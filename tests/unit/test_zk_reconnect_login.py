"""A session whose login is refused when kazoo reconnects (issue 33's review).

A SASL session reconnects to another member of the ensemble (or to a restarted server);
if that one does not speak SASL (``zk_sasl``'s empty challenge) or no longer accepts the
login, kazoo's connection thread stops the session (AUTH_FAILED) and fails the requests
in flight with ``AuthFailedError`` (``KazooClient._notify_pending``). One ZooKeeper
server cannot be made to do that to a live session here, so the request is a function
raising what kazoo raises then.
"""

from __future__ import annotations

import pytest
from kazoo.exceptions import AuthFailedError

from ledger_gc.errors import LedgerGcError
from ledger_gc.metadata.zk_client import guarded


def test_a_login_refused_on_reconnecting_is_a_one_line_error_not_a_traceback() -> None:
    def in_flight() -> None:
        raise AuthFailedError()

    with pytest.raises(LedgerGcError) as err:
        guarded("deleting ledger 7", "zk1:2181,zk2:2181", in_flight)
    message = str(err.value)
    assert "zk1:2181,zk2:2181" in message and "deleting ledger 7" in message, message
    assert "login" in message and "nothing was deleted" in message, message
