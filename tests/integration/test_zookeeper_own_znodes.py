"""ledger-gc's own znodes (``/ledger-gc``: its locks, its clock's ticks, its probes) on a
ZooKeeper secured as a production cluster's (the server and fixtures of
``test_zookeeper_security``): they carry the session's identity's ACL, never
``world:anyone`` ALL, so an anonymous client cannot park a lock node that stops every
cycle; a lock holder's text reaches the report bounded and escaped; and a run whose
identity may not use a ``/ledger-gc`` another identity made says which znode, whose
ACL, and who it is.
"""

# ruff: noqa: F811 (the secured server's fixtures are test_zookeeper_security's, imported)

from __future__ import annotations

import subprocess
from dataclasses import replace
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import CREATOR_ALL_ACL, make_acl
from test_zookeeper_security import (  # noqa: F401 (fixtures)
    ORDERS,
    USERS,
    Secured,
    cli_in_process,
    run_cli,
    secure_zookeeper,
    secured,
)

from ledger_gc.config.edge import zk_endpoint
from ledger_gc.metadata.zk_client import session
from ledger_gc.orphans.delete_lock import DELETE_LOCK_PATH
from ledger_gc.orphans.witness import TICKS_PATH, ServerClocks
from pulsar_cluster import ml_tags

pytestmark = pytest.mark.spark


def _sasl_client(secured: Secured, user: str) -> KazooClient:
    """A SASL session as ``user`` on the plain port (no client certificate), in the
    test's chroot."""
    client = KazooClient(
        hosts=secured.zookeeper.server.hosts + secured.chroot,
        sasl_options={"mechanism": "DIGEST-MD5", "username": user, "password": USERS[user]},
        timeout=10,
    )
    client.start(timeout=30)
    return client


def _acls_under(client: KazooClient, root: str) -> dict[str, list[tuple[int, str, str]]]:
    """Every znode under ``root`` (itself included) and its ACL."""
    found: dict[str, list[tuple[int, str, str]]] = {}
    todo = [root]
    while todo:
        path = todo.pop()
        acl, _ = client.get_acls(path)
        found[path] = [(a.perms, a.id.scheme, a.id.id) for a in acl]
        todo.extend(f"{path}/{child}" for child in client.get_children(path))
    return found


def test_own_znodes_carry_the_sessions_identity_and_an_anonymous_squatter_is_refused(
    secured: Secured,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 33, defect 4: under SASL ledger-gc's znodes were ``world:anyone`` ALL; an
    anonymous client parked a ``__lock__`` node and every later cycle reported the lock
    held "by another run" (the squatter's text) and deleted nothing."""
    settings = replace(secured.settings("bookkeeper"), orphan_lock_wait_seconds=2.0)
    status, first = cli_in_process(settings, monkeypatch, capsys, "orphans")
    assert status == 0, first
    assert {d["ledger_id"] for d in first["deleted"]} == secured.orphans

    # The squatter: no login at all, on the plain port.
    anonymous = KazooClient(hosts=secured.zookeeper.server.hosts + secured.chroot, timeout=10)
    anonymous.start(timeout=30)
    try:
        squat = f"{DELETE_LOCK_PATH}/squatter__lock__0000000000"
        try:
            anonymous.create(squat, b"mallory was here", makepath=True)
            squatted = "the anonymous client parked " + squat
        except NoAuthError:
            squatted = ""
    finally:
        anonymous.stop()
        anonymous.close()

    # A ledger of the live topic that its managed ledger does not list: leaked.
    leaked = secured.cluster.ledger(ml_tags(ORDERS), ledger_id=10_007)
    status, second = cli_in_process(settings, monkeypatch, capsys, "orphans")
    assert status == 0 and {d["ledger_id"] for d in second["deleted"]} == {leaked}, (
        second["delete_skipped"],
        squatted,
    )
    assert not squatted

    bookie = _sasl_client(secured, "bookkeeper")
    try:
        acls = _acls_under(bookie, "/ledger-gc")
    finally:
        bookie.stop()
        bookie.close()
    assert "/ledger-gc/locks/orphan-delete" in acls and "/ledger-gc/ticks" in acls, acls
    # The identities the cycle's session had: its SASL login and its certificate's.
    own = [(31, "sasl", "bookkeeper"), (31, "x509", "CN=ledger-gc")]
    assert {path: sorted(acl) for path, acl in acls.items()} == {path: own for path in acls}


def test_a_lock_holders_text_reaches_the_report_bounded_and_escaped(
    secured: Secured,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Whoever may write there (the same identity) can still park a lock node: what it
    holds is someone else's text, so the report quotes at most a line of it, with its
    control characters escaped."""
    settings = replace(secured.settings("bookkeeper"), orphan_lock_wait_seconds=1.0)
    bookie = _sasl_client(secured, "bookkeeper")
    text = "run\n\x1b[31mFAKE: all orphans deleted\x1b[0m\r" + "x" * 10_000
    try:
        bookie.create(
            f"{DELETE_LOCK_PATH}/squatter__lock__0000000000",
            text.encode(),
            makepath=True,
            acl=CREATOR_ALL_ACL,
            ephemeral=True,  # a live holder's (a persistent one is cleared as a squat)
        )
        status, report = cli_in_process(settings, monkeypatch, capsys, "orphans")
    finally:
        bookie.stop()
        bookie.close()

    assert status == 1 and report["deleted"] == [] and report["pending"], report
    skipped = report["delete_skipped"]
    assert "another run (" in skipped and "held the delete lock" in skipped
    assert "\n" not in skipped and "\x1b" not in skipped and "\r" not in skipped, skipped
    assert "\\n\\x1b[31mFAKE" in skipped, skipped
    assert len(skipped) < 600, len(skipped)


def _error(done: subprocess.CompletedProcess[str]) -> str:
    """The cycle's error, as its report says it."""
    errors = [
        line.strip() for line in done.stdout.splitlines() if line.strip().startswith("error:")
    ]
    assert len(errors) == 1, done.stdout + done.stderr
    return errors[0]


def test_a_ledger_gc_znode_of_another_identity_is_named_with_its_acl(secured: Secured) -> None:
    """``/ledger-gc`` made by another identity (mallory), readable by all but writable by
    mallory alone: a run as bookkeeper cannot create its clock's tick there. It says
    which znode, whose ACL, and who it is; not "refused reading ZooKeeper's clock"."""
    mallory = _sasl_client(secured, "mallory")
    try:
        mallory.create(
            "/ledger-gc", b"", acl=[*CREATOR_ALL_ACL, make_acl("world", "anyone", read=True)]
        )
    finally:
        mallory.stop()
        mallory.close()

    done = run_cli(secured.settings("bookkeeper"), "orphans")

    assert done.returncode == 2, done.stdout + done.stderr
    line = _error(done)
    assert "reading ZooKeeper's clock (NoAuth)" not in line, line
    assert "sasl:bookkeeper (also x509:CN=ledger-gc) lacks CREATE on /ledger-gc" in line, line
    assert "whose ACL gives it to sasl:mallory" in line, line
    assert "every ledger-gc run of a cluster" in line, line


def test_a_ledger_gc_znode_it_cannot_read_is_named_with_the_identity(secured: Secured) -> None:
    """The same, ``/ledger-gc`` CREATOR_ALL of mallory's: not even its ACL can be read."""
    mallory = _sasl_client(secured, "mallory")
    try:
        mallory.create("/ledger-gc/locks", b"", acl=CREATOR_ALL_ACL, makepath=True)
    finally:
        mallory.stop()
        mallory.close()

    done = run_cli(secured.settings("bookkeeper"), "orphans")

    assert done.returncode == 2, done.stdout + done.stderr
    line = _error(done)
    assert "reading ZooKeeper's clock (NoAuth)" not in line, line
    assert "sasl:bookkeeper (also x509:CN=ledger-gc) lacks CREATE on /ledger-gc" in line, line
    assert "whose ACL it cannot read either" in line, line


def test_a_client_certificate_alone_owns_ledger_gcs_znodes(secured: Secured) -> None:
    """TLS with a client certificate and no SASL login: the server's x509 identity is
    the session's, and ledger-gc's znodes are its alone."""
    ServerClocks().observe(zk_endpoint(secured.settings(None)), lambda: 0)

    with session(zk_endpoint(secured.settings(None))) as client:
        acls = _acls_under(client, "/ledger-gc")
    assert acls.keys() == {"/ledger-gc", TICKS_PATH}
    assert all(acl == [(31, "x509", "CN=ledger-gc")] for acl in acls.values()), acls
    anonymous = KazooClient(hosts=secured.zookeeper.server.hosts + secured.chroot, timeout=10)
    anonymous.start(timeout=30)
    try:
        with pytest.raises(NoAuthError):
            anonymous.create(f"{TICKS_PATH}/squat", b"")
        with pytest.raises(NoAuthError):
            anonymous.get_acls(TICKS_PATH)
    finally:
        anonymous.stop()
        anonymous.close()


def test_znodes_an_older_ledger_gc_left_open_are_given_to_the_identity(
    secured: Secured,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An upgrade: the ledger-gc before issue 33 made ``/ledger-gc`` and its locks
    ``world:anyone`` ALL under SASL, and creating new nodes right does not change theirs.
    A run with a login takes them back (setAcl, which that open ACL lets it do) before
    it uses them, so the squat is refused from the first run on."""
    anonymous = KazooClient(hosts=secured.zookeeper.server.hosts + secured.chroot, timeout=10)
    anonymous.start(timeout=30)
    try:
        for path in (DELETE_LOCK_PATH, TICKS_PATH):
            anonymous.create(path, b"", makepath=True)  # kazoo's default: world:anyone ALL
        status, report = cli_in_process(
            secured.settings("bookkeeper"), monkeypatch, capsys, "orphans"
        )
        assert status == 0, report
        with pytest.raises(NoAuthError):
            anonymous.create(f"{DELETE_LOCK_PATH}/squatter__lock__0000000000", b"squat")
    finally:
        anonymous.stop()
        anonymous.close()
    with session(zk_endpoint(secured.settings("bookkeeper"))) as client:
        acls = _acls_under(client, "/ledger-gc")
    own = [(31, "sasl", "bookkeeper"), (31, "x509", "CN=ledger-gc")]
    for path in ("/ledger-gc", "/ledger-gc/locks", DELETE_LOCK_PATH, TICKS_PATH):
        assert sorted(acls[path]) == own, (path, acls[path])


def test_a_lock_node_parked_before_the_upgrade_does_not_hold_the_lock_after_it(
    secured: Secured,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 33's review: the squat made while an older ledger-gc's lock dir was open
    (``world:anyone`` ALL), before the upgrade. Taking the dir back does not remove the
    node already parked in it, and it is persistent: no session of ledger-gc's ever made
    it (its lock nodes are ephemeral), no session's end removes it, and every cycle after
    the upgrade found the lock held "by another run" (the squatter's text) for good."""
    anonymous = KazooClient(hosts=secured.zookeeper.server.hosts + secured.chroot, timeout=10)
    anonymous.start(timeout=30)
    try:
        anonymous.create(DELETE_LOCK_PATH, b"", makepath=True)  # the older ledger-gc's
        anonymous.create(
            f"{DELETE_LOCK_PATH}/squatter__lock__0000000000", b"ledger-gc run scheduled__x"
        )
    finally:
        anonymous.stop()
        anonymous.close()

    settings = replace(secured.settings("bookkeeper"), orphan_lock_wait_seconds=2.0)
    status, report = cli_in_process(settings, monkeypatch, capsys, "orphans")

    assert status == 0, report.get("delete_skipped")
    assert {d["ledger_id"] for d in report["deleted"]} == secured.orphans, report
