"""ZooKeeper addresses in Pulsar's and BookKeeper's forms, read into kazoo's one form.

Every form an operator can copy from a broker.conf or a bookie's configuration means what
Pulsar or BookKeeper make of it (``ledger_gc.config.zk_addresses``' docstring names their
parsers); every other one is one line naming the setting, never a traceback.
"""

from __future__ import annotations

import pytest

from ledger_gc.config.settings import Settings
from ledger_gc.config.zk_addresses import parse_zk_address
from ledger_gc.errors import ConfigError

# given -> (kazoo's hosts, the BookKeeper ledgers root it names, the manager it names)
VALID = {
    "h1:2181,h2:2181/chroot": ("h1:2181,h2:2181/chroot", None, None),
    "h1:2181, h2:2181/chroot/": ("h1:2181,h2:2181/chroot", None, None),
    "zookeeper": ("zookeeper", None, None),  # kazoo's default port
    "[::1]:2181,10.0.0.7:2181": ("[::1]:2181,10.0.0.7:2181", None, None),
    # Pulsar's metadataStoreUrl ("zk:" stripped, as MetadataStoreFactoryImpl does).
    "zk:h1:2181,h2:2181/chroot": ("h1:2181,h2:2181/chroot", None, None),
    "zk:zk1:2181/pulsar": ("zk1:2181/pulsar", None, None),
    # Pulsar's metadata driver: an opaque URL whose store keeps /ledgers below its chroot.
    "metadata-store:zk:h1:2181/chroot": ("h1:2181/chroot", None, None),
    "metadata-store:zk:h1:2181;h2:2181/chroot?batchingEnabled=false": (
        "h1:2181,h2:2181/chroot",
        None,
        None,
    ),
    "metadata-store:h1:2181": ("h1:2181", None, None),
    # BookKeeper's metadataServiceUri: the path is the ledgers root, no chroot.
    "zk+hierarchical://h1:2181;h2:2181/ledgers": ("h1:2181,h2:2181", "/ledgers", "hierarchical"),
    "zk+longhierarchical://h1:2181/pulsar/ledgers": (
        "h1:2181",
        "/pulsar/ledgers",
        "longhierarchical",
    ),
    "zk+flat://h1:2181/ledgers": ("h1:2181", "/ledgers", "flat"),
    "zk+null://h1:2181;h2:2181/ledgers": ("h1:2181,h2:2181", "/ledgers", None),
    "zk://h1:2181/ledgers/": ("h1:2181", "/ledgers", None),
    "ZK+Hierarchical://h1:2181/ledgers": ("h1:2181", "/ledgers", "hierarchical"),
}

# given -> what the one line must say
INVALID = {
    "": "is empty",
    "oxia://oxia:6648/default": "is Oxia, not ZooKeeper",
    "etcd:http://etcd:2379": "is etcd, not ZooKeeper",
    "rocksdb:/data/metadata": "is RocksDB, not ZooKeeper",
    "memory:local": "is an in-memory store, not ZooKeeper",
    "metadata-store:oxia://oxia:6648": "is Oxia, not ZooKeeper",
    "metadata-store:": "names no metadata store",
    "zk+ms://h1:2181/ledgers": "names ledger manager 'ms'",
    "zk+hierarchical://h1:2181": "has no ledgers root path",
    "zk+hierarchical:///ledgers": "has no hosts",
    "zk:zk1:abc/pulsar": "has port 'abc'",
    "zk1:2181:2181": "has no host name",
    "zk1:70000": "has port '70000'",
    "zk1:2181,,zk2:2181": "has no host name in ''",
    "zk1:2181/a//b": "not a ZooKeeper path",
    "zk1:2181/a/../b": "not a ZooKeeper path",
    "http://zk1:2181": "is a URL of a store ledger-gc cannot read",
    "not an address": "has no host name",
    "zk:zk:zk1:2181": "has no host name",
}


@pytest.mark.parametrize("given", VALID)
def test_every_form_of_pulsar_and_bookkeeper_reads_as_kazoo_hosts(given: str) -> None:
    address = parse_zk_address("LEDGERGC_ZK_HOSTS", given)
    assert (address.hosts, address.ledgers_root, address.manager) == VALID[given]
    # Its one spelling reads back as the same address (what a child process is handed).
    assert parse_zk_address("LEDGERGC_ZK_HOSTS", address.text) == address


@pytest.mark.parametrize("given", INVALID)
def test_a_bad_address_is_one_line_naming_the_setting(given: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_zk_address("LEDGERGC_BK_ZK_HOSTS", given)
    message = str(err.value)
    assert message.startswith("LEDGERGC_BK_ZK_HOSTS")
    assert INVALID[given] in message
    assert "\n" not in message


def test_the_settings_keep_kazoos_form_and_the_spelling_given() -> None:
    settings = Settings.from_env(
        {
            "LEDGERGC_ZK_HOSTS": "zk:zk1:2181,zk2:2181/pulsar",
            "LEDGERGC_BK_ZK_HOSTS": "zk+hierarchical://bk1:2181;bk2:2181/bk/ledgers",
        }
    )
    assert settings.zk_hosts == "zk1:2181,zk2:2181/pulsar"
    assert settings.zk_chroot == "/pulsar"
    assert settings.bk_zk_hosts == "bk1:2181,bk2:2181"
    assert settings.bookkeeper_root == "/bk/ledgers"
    assert settings.bookkeeper_manager == "hierarchical"
    assert settings.bookkeeper_settings().zk_hosts == "bk1:2181,bk2:2181"
    assert settings.given("LEDGERGC_ZK_HOSTS") == "zk:zk1:2181,zk2:2181/pulsar"
    # A copy with other changes keeps the spelling and what the address names.
    copy = settings.with_overrides(grace_seconds=5)
    assert copy.bookkeeper_root == "/bk/ledgers"
    assert copy.given("LEDGERGC_BK_ZK_HOSTS") == "zk+hierarchical://bk1:2181;bk2:2181/bk/ledgers"
    # A child process (spark-submit) gets kazoo's form, and reads it the same.
    child = Settings.from_env(settings.to_env())
    assert child.zk_hosts == settings.zk_hosts and child.bk_zk_hosts == settings.bk_zk_hosts


def test_where_the_ledgers_root_comes_from() -> None:
    url = "zk+hierarchical://bk1:2181/bk/ledgers"
    assert Settings.from_env({"LEDGERGC_BK_ZK_HOSTS": url}).bookkeeper_root == "/bk/ledgers"
    # metadata-store: keeps /ledgers below its chroot, as Pulsar's metadata driver reads it.
    pulsar = Settings.from_env({"LEDGERGC_BK_ZK_HOSTS": "metadata-store:zk:bk1:2181/bk"})
    assert (pulsar.bk_zk_hosts, pulsar.bookkeeper_root) == ("bk1:2181/bk", "/ledgers")
    # Pulsar's own store: BookKeeper below Pulsar's chroot, at /ledgers.
    own = Settings.from_env({"LEDGERGC_ZK_HOSTS": "zk:zk1:2181/pulsar"})
    assert (own.bookkeeper_hosts, own.bookkeeper_root) == ("zk1:2181/pulsar", "/ledgers")
    # A BookKeeper URL for Pulsar's own ensemble: chroot-less, its path the ledgers root.
    shared = Settings.from_env({"LEDGERGC_ZK_HOSTS": "zk+null://zk1:2181/pulsar/ledgers"})
    assert (shared.zk_hosts, shared.bookkeeper_root) == ("zk1:2181", "/pulsar/ledgers")
    # An explicit root below a chroot that names none.
    explicit = {"LEDGERGC_BK_ZK_HOSTS": "bk1:2181/bk", "LEDGERGC_BK_LEDGERS_ROOT": "/l"}
    assert Settings.from_env(explicit).bookkeeper_root == "/l"


def test_status_shows_the_spelling_given_and_the_form_kept() -> None:
    settings = Settings.from_env({"LEDGERGC_ZK_HOSTS": "metadata-store:zk:zk1:2181/pulsar"})
    shown = settings.provenance()["LEDGERGC_ZK_HOSTS"]
    assert shown == {
        "value": "metadata-store:zk:zk1:2181/pulsar",
        "normalized": "zk1:2181/pulsar",
        "source": "env",
    }
    url = Settings.from_env({"LEDGERGC_BK_ZK_HOSTS": "zk+flat://bk1:2181/bk"})
    root = url.provenance()["LEDGERGC_BK_LEDGERS_ROOT"]
    assert root == {"value": "/bk", "source": "address", "from": "the path of LEDGERGC_BK_ZK_HOSTS"}


def test_the_settings_pickle_with_the_spelling_given() -> None:
    """Spark ships the settings to executors pickled; the spelling goes with them."""
    import pickle

    settings = Settings.from_env({"LEDGERGC_BK_ZK_HOSTS": "zk+flat://bk1:2181/bk"})
    copy = pickle.loads(pickle.dumps(settings))
    assert copy == settings
    assert (copy.bookkeeper_root, copy.bookkeeper_manager) == ("/bk", "flat")


# --- every copy of the settings names the BookKeeper the task names (review 28, 1) ------

#: Each form an operator can give, as Pulsar's own address (BookKeeper in Pulsar's store)
#: or as BookKeeper's: a spark-submit child (``to_env``), an executor (a pickle) and any
#: copy must scan the same root of the same ensemble with the same manager.
ADDRESS_FORMS = [
    ("LEDGERGC_BK_ZK_HOSTS", "zk+hierarchical://bk1:2181;bk2:2181/bk-east/ledgers"),
    ("LEDGERGC_BK_ZK_HOSTS", "zk+longhierarchical://bk1:2181/custom"),
    ("LEDGERGC_BK_ZK_HOSTS", "zk+null://bk1:2181/bk/ledgers"),
    ("LEDGERGC_BK_ZK_HOSTS", "zk://bk1:2181/other-ledgers/"),
    ("LEDGERGC_BK_ZK_HOSTS", "metadata-store:zk:bk1:2181;bk2:2181/bk?batchingEnabled=false"),
    ("LEDGERGC_BK_ZK_HOSTS", "zk:bk1:2181/bk"),
    ("LEDGERGC_BK_ZK_HOSTS", "bk1:2181,bk2:2181/bk"),
    ("LEDGERGC_BK_ZK_HOSTS", "[::1]:2181,bk2/bk"),
    ("LEDGERGC_ZK_HOSTS", "zk+flat://zk1:2181/pulsar/ledgers"),
    ("LEDGERGC_ZK_HOSTS", "metadata-store:zk:zk1:2181/pulsar"),
    ("LEDGERGC_ZK_HOSTS", "zk:zk1:2181/pulsar"),
    ("LEDGERGC_ZK_HOSTS", "zk1:2181,zk2:2181/pulsar"),
]


def _what_bookkeeper_scans(settings: Settings) -> tuple[object, ...]:
    bookkeeper = settings.bookkeeper_settings()
    return (
        settings.zk_hosts,
        settings.zk_chroot,
        settings.bookkeeper_hosts,
        settings.bookkeeper_root,
        settings.bookkeeper_manager,
        bookkeeper.zk_hosts,
        bookkeeper.bookkeeper_root,
    )


@pytest.mark.parametrize(("variable", "address"), ADDRESS_FORMS)
def test_every_copy_of_the_settings_scans_the_bookkeeper_the_task_scans(
    variable: str, address: str
) -> None:
    import dataclasses
    import pickle

    task = Settings.from_env({variable: address})
    copies = {
        "spark-submit's child (to_env, from_env)": Settings.from_env(task.to_env()),
        "an executor's (a pickle)": pickle.loads(pickle.dumps(task)),
        "a copy with another change": task.with_overrides(grace_seconds=5),
        "a copy without provenance": dataclasses.replace(task, origins={}),
        "a child of a child": Settings.from_env(Settings.from_env(task.to_env()).to_env()),
    }
    for how, copy in copies.items():
        assert _what_bookkeeper_scans(copy) == _what_bookkeeper_scans(task), how


def test_a_ledgers_root_that_contradicts_the_urls_path_is_one_line() -> None:
    url = "zk+hierarchical://bk1:2181/bk/ledgers"
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"LEDGERGC_BK_ZK_HOSTS": url, "LEDGERGC_BK_LEDGERS_ROOT": "/ledgers"})
    message = str(err.value)
    assert message.startswith("LEDGERGC_BK_LEDGERS_ROOT='/ledgers' contradicts")
    assert url in message and "/bk/ledgers" in message and "\n" not in message
    # Pulsar's address in BookKeeper's form names BookKeeper's root too.
    with pytest.raises(ConfigError, match="LEDGERGC_ZK_HOSTS"):
        Settings.from_env(
            {"LEDGERGC_ZK_HOSTS": "zk+null://zk1:2181/a", "LEDGERGC_BK_LEDGERS_ROOT": "/b"}
        )
    # The same root said twice is no contradiction; a chroot's address names no root.
    same = {"LEDGERGC_BK_ZK_HOSTS": url, "LEDGERGC_BK_LEDGERS_ROOT": "/bk/ledgers"}
    assert Settings.from_env(same).bookkeeper_root == "/bk/ledgers"
    chroot = {"LEDGERGC_BK_ZK_HOSTS": "zk:bk1:2181/bk", "LEDGERGC_BK_LEDGERS_ROOT": "/l"}
    assert Settings.from_env(chroot).bookkeeper_root == "/l"


def test_each_server_is_a_host_and_a_port_to_connect_to() -> None:
    """The one reader of a host list also says where each server is (ZooKeeper's port
    where none is given; an IPv6 literal's brackets are the address's syntax, not its
    host), so no second parser reads it another way."""
    address = parse_zk_address("LEDGERGC_ZK_HOSTS", "[::1],[fe80::1%eth0]:2281,zk3/pulsar")
    assert address.server_addresses() == [("::1", 2181), ("fe80::1%eth0", 2281), ("zk3", 2181)]
    assert address.hosts == "[::1],[fe80::1%eth0]:2281,zk3/pulsar"
    assert Settings.from_env({"LEDGERGC_ZK_HOSTS": address.hosts}).zk_chroot == "/pulsar"
