"""ZooKeeper addresses as Pulsar and BookKeeper write them, read into one value.

Operators copy addresses from their brokers' and bookies' configuration, so a setting that
names a ZooKeeper ensemble (``LEDGERGC_ZK_HOSTS``, ``LEDGERGC_BK_ZK_HOSTS``) takes every
form those write (DESIGN.md "Connecting to a production Pulsar cluster"):

* kazoo's own: ``h1:2181,h2:2181/chroot``;
* Pulsar's ``metadataStoreUrl``: ``zk:h1:2181,h2:2181/chroot`` (Pulsar strips ``zk:`` and
  hands the rest to ZooKeeper; a bare host list is ZooKeeper too);
* Pulsar's metadata driver for BookKeeper: ``metadata-store:zk:h1:2181/chroot``. Pulsar's
  ``AbstractMetadataDriver`` opens the store named after ``metadata-store:`` (``;`` read
  as ``,``, its ``?key=value`` tuning parameters dropped) and keeps the ledgers at
  ``/ledgers`` below that store's chroot: the URL is opaque, so it has no path of its own;
* BookKeeper's ``metadataServiceUri``: ``zk+hierarchical://h1:2181;h2:2181/ledgers``
  (``ZKMetadataDriverBase``): the authority is the host list (``;`` for ``,``), the path is
  the ledgers root itself (no chroot), and the ``+type`` names the ledger manager
  (``hierarchical``, ``longhierarchical``, ``flat``; ``null`` or none: ``LAYOUT`` says).

Anything else (Pulsar's ``oxia://``, ``etcd:``, ``rocksdb:``, ``memory:`` stores,
BookKeeper's ``ms`` manager, a bad host or port) is one ``ConfigError`` naming the setting:
ledger-gc reads metadata from ZooKeeper only. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ledger_gc.errors import ConfigError

#: BookKeeper's ledger manager names in a ``zk+<name>://`` URL -> the layout its ledger
#: znodes have (``rules.bookkeeper.ledger_paths``'s names). ``null``: ``LAYOUT`` decides.
URL_MANAGERS = {
    "hierarchical": "hierarchical",
    "longhierarchical": "longhierarchical",
    "flat": "flat",
    "null": None,
}
#: Pulsar's metadata stores that are not ZooKeeper (MetadataStoreFactoryImpl's schemes),
#: and what to call them in an error.
OTHER_STORES = {
    "oxia": "Oxia",
    "etcd": "etcd",
    "rocksdb": "RocksDB",
    "memory": "an in-memory store",
}
DEFAULT_LEDGERS_ROOT = "/ledgers"
#: ZooKeeper's client port, which kazoo assumes where a server names none.
DEFAULT_PORT = 2181
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_HOSTNAME = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?\]")
EXAMPLES = (
    "host:port[,host:port][/chroot] (zk1:2181,zk2:2181/pulsar), Pulsar's zk:… or "
    "metadata-store:zk:…, or BookKeeper's zk+hierarchical://zk1:2181;zk2:2181/ledgers"
)
#: The forms of Pulsar's configuration store (``configurationMetadataStoreUrl``), which
#: has a chroot, never BookKeeper's ledgers root: its errors offer no ``zk+…://``.
CONFIG_STORE_EXAMPLES = (
    "host:port[,host:port][/chroot] (zk1:2181,zk2:2181/global), or Pulsar's zk:… or "
    "metadata-store:zk:… as broker.conf's configurationMetadataStoreUrl has it"
)


@dataclass(frozen=True)
class ZkAddress:
    """One ZooKeeper address, read from any of the forms above: the value the settings
    keep for ``LEDGERGC_ZK_HOSTS`` and ``LEDGERGC_BK_ZK_HOSTS``.

    All of it is data, so every copy of the settings (``to_env`` for spark-submit, a pickle
    for an executor, a ``replace``) names the same ensemble, chroot, ledgers root and
    manager: a Spark app that lost a ``zk+…://`` URL's path would scan ``/ledgers``, which
    may be another BookKeeper's (review 28). The spelling given is not part of it (two
    spellings of one address are one address); ``Settings.origins`` keep it for people.
    """

    #: The servers, ``host[:port]`` each as written (kazoo takes a missing port as 2181).
    servers: tuple[str, ...]
    #: The chroot ("" for none); a ``zk+…://`` URL has none.
    chroot: str = ""
    #: BookKeeper's ledgers root when the address names it (a ``zk+…://`` URL's path);
    #: None: ``/ledgers`` below the chroot.
    ledgers_root: str | None = None
    #: The ledger manager a ``zk+<name>://`` URL names; None: the ``LAYOUT`` znode decides.
    manager: str | None = None

    @property
    def hosts(self) -> str:
        """kazoo's connect string, the chroot included: ``h1:2181,h2:2181/chroot``."""
        return ",".join(self.servers) + self.chroot

    @property
    def text(self) -> str:
        """The one spelling that reads back as this address: a ``zk+…://`` URL when it
        names a ledgers root (what ``to_env`` hands a child process), else kazoo's."""
        if self.ledgers_root is None:
            return self.hosts
        return f"zk+{self.manager or 'null'}://{';'.join(self.servers)}{self.ledgers_root}"

    def __str__(self) -> str:
        return self.text

    def server_addresses(self) -> list[tuple[str, int]]:
        """Each server's ``(host, port)``, the port 2181 where none is given, an IPv6
        literal without its brackets (what a socket connects to)."""
        found = []
        for server in self.servers:
            host, port = _split_port(server)
            found.append((host.strip("[]"), int(port) if port else DEFAULT_PORT))
        return found


def parse_zk_address(name: str, text: str, examples: str = EXAMPLES) -> ZkAddress:
    """``text`` in any form above, or one ``ConfigError`` naming ``name`` and the fix
    (``examples``: the forms that setting takes)."""
    given = text.strip()
    if not given:
        raise ConfigError(f"{name} is empty; set it to {examples}")
    bad = _Refusal(name, given, examples)
    lowered = given.lower()
    if lowered.startswith("metadata-store:"):
        inner = given[len("metadata-store:") :].partition("?")[0].replace(";", ",")
        if not inner:
            raise bad("names no metadata store after metadata-store:")
        return _pulsar_store(bad, inner)
    url = re.match(r"zk(\+[A-Za-z]+)?://", given, flags=re.IGNORECASE)
    if url:
        return _bookkeeper_url(bad, given, url.group(1))
    return _pulsar_store(bad, given)


def is_bookkeeper_url(text: str) -> bool:
    """Whether ``text`` is BookKeeper's ``zk[+manager]://`` form, whose path is the
    ledgers root and never a chroot."""
    return re.match(r"\s*zk(\+[A-Za-z]+)?://", text, flags=re.IGNORECASE) is not None


class _Refusal:
    """Makes the one-line errors of one value: the setting, the value, the problem."""

    def __init__(self, name: str, given: str, examples: str = EXAMPLES) -> None:
        self.name = name
        self.given = given
        self.examples = examples

    def __call__(self, problem: str, fix: str = "") -> ConfigError:
        return ConfigError(
            f"{self.name}={self.given!r} {problem}; {fix or 'set it to ' + self.examples}"
        )


def _pulsar_store(bad: _Refusal, text: str) -> ZkAddress:
    """A Pulsar ``metadataStoreUrl`` (``zk:…`` or a bare host list)."""
    scheme = _SCHEME.match(text)
    if scheme and scheme.group(1).lower() == "zk" and not text[3:].startswith("//"):
        text = text[3:]
    elif scheme and scheme.group(1).lower() in OTHER_STORES:
        store = OTHER_STORES[scheme.group(1).lower()]
        raise bad(
            f"is {store}, not ZooKeeper",
            "ledger-gc reads Pulsar's and BookKeeper's metadata from ZooKeeper only: set "
            f"it to {bad.examples}",
        )
    elif "://" in text:
        raise bad("is a URL of a store ledger-gc cannot read")
    servers, chroot = _host_list(bad, text)
    return ZkAddress(servers, chroot)


def _bookkeeper_url(bad: _Refusal, text: str, plus: str | None) -> ZkAddress:
    """``zk[+manager]://h1:2181;h2:2181/ledgers`` (BookKeeper's metadataServiceUri)."""
    manager_name = (plus or "+null")[1:].lower()
    if manager_name not in URL_MANAGERS:
        raise bad(
            f"names ledger manager {manager_name!r}",
            "ledger-gc reads the hierarchical, longhierarchical and flat managers "
            "(zk+hierarchical://, zk+longhierarchical://, zk+flat://, or zk+null:// to "
            "follow LAYOUT)",
        )
    rest = text.split("://", 1)[1].partition("?")[0]
    authority, slash, path = rest.partition("/")
    if not authority:
        raise bad("has no hosts")
    root = "/" + path.rstrip("/")
    if not slash or root == "/":
        raise bad("has no ledgers root path (BookKeeper's zkLedgersRootPath, e.g. /ledgers)")
    _check_path(bad, root)
    servers, _ = _host_list(bad, authority.replace(";", ","))
    return ZkAddress(servers, ledgers_root=root, manager=URL_MANAGERS[manager_name])


def _host_list(bad: _Refusal, text: str) -> tuple[tuple[str, ...], str]:
    """``h1:2181,h2:2181[/chroot]`` checked host by host -> (the servers, without blanks;
    the chroot, "" for none, without a trailing slash). The one reader of a host list:
    kazoo takes a missing port as 2181, so one may be left out."""
    servers, slash, chroot = text.partition("/")
    hosts = []
    for server in servers.split(","):
        server = server.strip()
        host, port = _split_port(server)
        if not host or not (_HOSTNAME.fullmatch(host) or _IPV6.fullmatch(host)):
            raise bad(f"has no host name in {server!r}")
        if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
            raise bad(f"has port {port!r} in {server!r}, which is not a port number (1-65535)")
        hosts.append(server)
    chroot = chroot.strip().rstrip("/")
    if slash and chroot:
        _check_path(bad, "/" + chroot)
        return tuple(hosts), "/" + chroot
    return tuple(hosts), ""


def _split_port(server: str) -> tuple[str, str | None]:
    if server.startswith("["):  # [ipv6]:port
        host, _, rest = server.partition("]")
        return host + "]", rest[1:] if rest.startswith(":") else (rest or None)
    host, colon, port = server.rpartition(":")
    return (host, port) if colon else (server, None)


def _check_path(bad: _Refusal, path: str) -> None:
    parts = path.split("/")[1:]
    if any(part in ("", ".", "..") for part in parts):
        raise bad(f"has path {path}, which is not a ZooKeeper path")
