"""The ACL of ledger-gc's own znodes (``zk_client.own_acl``) and how a text another
process wrote in a lock node is quoted (``znode_text.quoted``). Against a real secured
ZooKeeper: ``tests/integration/test_zookeeper_own_znodes.py``."""

from __future__ import annotations

import pytest
from kazoo.security import CREATOR_ALL_ACL

from ledger_gc.config.jaas import GSSAPI, ZooKeeperLogin
from ledger_gc.metadata.zk_client import own_acl
from ledger_gc.metadata.znode_text import MAX_CHARS, quoted


@pytest.mark.parametrize(
    "digest, login, certificate",
    [
        ("gc:secret", None, False),
        (None, ZooKeeperLogin("DIGEST-MD5", "gc", "secret"), False),
        (None, ZooKeeperLogin(GSSAPI, "gc@EXAMPLE.COM"), False),
        (None, None, True),
    ],
)
def test_any_login_gives_ledger_gcs_znodes_to_the_sessions_identities(
    digest: str | None, login: ZooKeeperLogin | None, certificate: bool
) -> None:
    assert own_acl(digest=digest, login=login, client_certificate=certificate) == list(
        CREATOR_ALL_ACL
    )


def test_an_anonymous_session_keeps_zookeepers_open_default() -> None:
    # CREATOR_ALL without an authenticated identity is refused (InvalidACL).
    assert own_acl(digest=None, login=None, client_certificate=False) is None


def test_a_holders_text_is_one_bounded_line() -> None:
    assert quoted("cli-20261129T082555Z-7779") == "cli-20261129T082555Z-7779"
    assert quoted("a\nb\x1b[31mc\r") == "a\\nb\\x1b[31mc\\r"
    long = quoted("x" * 10_000)
    assert long == "x" * MAX_CHARS + "... (10000 characters)"
