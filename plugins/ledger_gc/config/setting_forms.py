"""The forms a setting's value must have: each check names the variable and the fix.

Used by the settings' declarations (``SettingSpec.check``), so a value is checked the same
way whether it came from the environment, a connection, the Airflow variable or a run's
params. Each check takes the variable's name and the value, and raises ``ConfigError``
with one line (DESIGN.md: a bad setting is exit 2 and one line naming it).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ledger_gc.config.zk_addresses import (
    CONFIG_STORE_EXAMPLES,
    ZkAddress,
    is_bookkeeper_url,
    parse_zk_address,
)
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage.offload_drivers import check_driver
from ledger_gc.rules.storage.offload_keys import UNTAGGED_CLUSTER

# botocore's own rules: a region is a DNS label; a bucket name as botocore accepts it
# (legacy names included), so a bucket that S3 has is never refused here.
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")
_BUCKET = re.compile(r"[a-zA-Z0-9.\-_]{1,255}")
# A Pulsar cluster name as Pulsar accepts it (NamedEntity: letters, digits, "-=:._").
_PULSAR_CLUSTER = re.compile(r"[A-Za-z0-9=:._-]+")


def check_zk_address(name: str, address: str | ZkAddress) -> None:
    """A ZooKeeper address in kazoo's, Pulsar's or BookKeeper's form
    (``ledger_gc.config.zk_addresses``), each port 1-65535; no other metadata store."""
    if not isinstance(address, ZkAddress):
        parse_zk_address(name, address)


def check_config_store_address(name: str, address: str | ZkAddress) -> None:
    """Pulsar's configuration store in the forms of ``configurationMetadataStoreUrl``
    (kazoo's, ``zk:…``, ``metadata-store:zk:…``); not BookKeeper's ``zk+…://`` form,
    whose path is a ledgers root, not a chroot."""
    if isinstance(address, ZkAddress):
        return
    if is_bookkeeper_url(address):
        raise ConfigError(
            f"{name}={address!r} is BookKeeper's metadataServiceUri form, whose path is a "
            "ledgers root; set it as broker.conf's configurationMetadataStoreUrl has it "
            "(zk:zk1:2181,zk2:2181/chroot, or host:port[,host:port][/chroot])"
        )
    parse_zk_address(name, address, CONFIG_STORE_EXAMPLES)


def as_zk_address(address: str | ZkAddress) -> ZkAddress:
    """A checked address as the settings keep it (``ZkAddress``: all it names)."""
    return address if isinstance(address, ZkAddress) else parse_zk_address("address", address)


def check_endpoint(name: str, url: str | None) -> None:
    """An http(s) URL with a host (empty: the cloud's own), and nothing else in it.

    An endpoint is no secret setting: ``status`` shows it, errors and logs name it. So
    a password (``https://user:key@host``) or a query (an Azure account URL with its
    SAS, ``?sv=...&sig=...``) is refused, and the error shows the URL without either."""
    if not url:
        return
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise ConfigError(
            f"{name}={_without_secrets(url)!r} is not an endpoint URL; set it like "
            "http://127.0.0.1:9000 or https://s3.example.com (empty: the cloud's own)"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{name}={_without_secrets(url)!r} carries a user name or password; give the "
            "endpoint without it and the credentials in their own settings (AWS_*, "
            "AZURE_STORAGE_*, LEDGERGC_OFFLOAD_GCS_*, or a connection)"
        )
    if parts.query or parts.fragment:
        raise ConfigError(
            f"{name}={_without_secrets(url)!r} carries a query (a SAS?); give the endpoint "
            "without it and a SAS as LEDGERGC_OFFLOAD_AZURE_SAS (or the wasb_default "
            "connection's sas_token)"
        )


def _without_secrets(url: str) -> str:
    """``url`` as an error may show it: no user or password, no query or fragment."""
    scheme, _, rest = url.partition("://")
    if not rest:
        scheme, rest = "", url
    rest = re.split(r"[?#]", rest, maxsplit=1)[0]
    host, slash, path = rest.partition("/")
    if "@" in host:
        host = "***@" + host.rsplit("@", 1)[1]
    shown = f"{scheme}://{host}{slash}{path}" if scheme else f"{host}{slash}{path}"
    return shown + ("?***" if re.search(r"[?#]", url) else "")


def check_offload_driver(name: str, driver: str) -> None:
    """One of Pulsar's offload drivers whose store ledger-gc reads (S3's API, GCS, Azure)."""
    try:
        check_driver(name, driver)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def check_region(name: str, region: str) -> None:
    """A region name as botocore accepts it (a DNS label)."""
    if not _REGION.fullmatch(region):
        raise ConfigError(
            f"{name}={region!r} is not a region name (letters, digits and '-', e.g. us-east-1)"
        )


def check_bucket(name: str, bucket: str) -> None:
    """A bucket name as botocore accepts it (legacy names too), or empty."""
    # An empty bucket turns the S3 block source off (a Pulsar cluster keeps its data in
    # BookKeeper); the trim and the managed-ledger library then refuse to run.
    if bucket and not _BUCKET.fullmatch(bucket):
        raise ConfigError(
            f"{name}={bucket!r} is not a bucket name (letters, digits, '.', '-', '_')"
        )


def check_digest(name: str, digest: str) -> None:
    """``user:password`` (ZooKeeper digest auth)."""
    if ":" not in digest:
        raise ConfigError(f"{name} must be user:password")


def check_ledgers_root(name: str, root: str) -> None:
    """An absolute znode path with no empty, ``.`` or ``..`` part, not ``/``."""
    if (
        not root.startswith("/")
        or root != "/" + root.strip("/")
        or root == "/"
        or "//" in root
        or any(part in (".", "..") for part in root.split("/"))
    ):
        raise ConfigError(
            f"{name}={root!r} is not a znode path like /ledgers "
            "(BookKeeper's zkLedgersRootPath, below the chroot of LEDGERGC_BK_ZK_HOSTS)"
        )


def check_pulsar_clusters(name: str, names: tuple[str, ...]) -> None:
    """Pulsar cluster names, or ``(untagged)``."""
    for cluster in names:
        if cluster != UNTAGGED_CLUSTER and not _PULSAR_CLUSTER.fullmatch(cluster):
            raise ConfigError(
                f"{name}={','.join(names)!r}: {cluster!r} is not a Pulsar "
                "cluster name (letters, digits and '-=:._'); list this store's clusters "
                f"comma-separated, e.g. us-east or us-east,{UNTAGGED_CLUSTER}"
            )
