"""Settings resolved once, at the edge, into the endpoints the library talks to.

A CLI command and an Airflow task hold a ``Settings``; everything below them (the
engines, the sources, the locks, the Spark jobs) is given what this module makes of it:
typed, immutable endpoints, as Airflow's hooks and kazoo's client take a connection
rather than a configuration. ``edge.resolve`` is the one function that reads the
settings for them; a layer below that read a setting itself, built its own TLS context
or picked a login would repeat the edge.

* ``ZkEndpoint``: one ZooKeeper ensemble as ledger-gc opens sessions to it (Pulsar's
  local store, or BookKeeper's): its servers and chroot, the TLS material and login
  (read once, from the settings' checks), the digest auth (with the login and a client
  certificate, the identities ledger-gc's own znodes are created for:
  ``zk_client.own_acl``), the session timeout, the read budget and the largest record a
  write may send; and which ensemble it is, so that an error names the variable that
  set each part (``names``). ``metadata.zk_client.connect`` is the one place a session
  to it opens.
* ``BookKeeperEndpoint``: BookKeeper's metadata: its ensemble's ``ZkEndpoint``, the
  ledgers root and the ledger manager an address names.

An endpoint that crosses a process boundary (a Spark closure) is pickled with
``portable`` security (PEM text, a JAAS login as username and password): a path on the
driver may not exist on an executor. Its ``repr`` shows no secret.

``ledger_gc.config.edge.resolve`` makes them from a ``Settings``; this module does not
import the settings, so that a layer given endpoints cannot reach them through it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ledger_gc.config.jaas import ZooKeeperLogin
from ledger_gc.config.policy import Policy
from ledger_gc.config.secret_masking import install_secret_masking
from ledger_gc.config.secret_values import (
    connection_string_secrets,
    digest_secrets,
    login_password,
)
from ledger_gc.config.zk_addresses import ZkAddress
from ledger_gc.config.zk_security import PULSAR_NAMES, PULSAR_PREFIX, Names, ZkSecurity
from ledger_gc.config.zk_security import specs as security_specs
from ledger_gc.errors import ConfigError
from ledger_gc.state.url import password, written_password

#: Whose ensemble an endpoint is (``ZkEndpoint.ensemble``): Pulsar's local store,
#: BookKeeper's, Pulsar's configuration store.
PULSAR, BOOKKEEPER, CONFIGURATION = "pulsar", "bookkeeper", "configuration"
# ZooKeeper refuses a request over its jute.maxbuffer (default 0xfffff, 1 MiB less one
# byte) by dropping the connection. ledger-gc keeps every write request it sends below
# this, leaving headroom for the request's own framing and a multi's other operations.
DEFAULT_ZK_MAX_RECORD_BYTES = 1_000_000


@dataclass(frozen=True)
class ZkEndpoint:
    """One ZooKeeper ensemble and chroot, and how ledger-gc's sessions to it are made."""

    address: ZkAddress
    #: TLS and SASL (``ZkSecurity``: what its files held is read once and kept with it).
    security: ZkSecurity = field(default_factory=ZkSecurity, repr=False)
    #: ``user:password`` of ZooKeeper digest auth (``LEDGERGC_ZK_DIGEST``): added to every
    #: session, one of the identities ledger-gc's own znodes are created for.
    digest: str | None = field(default=None, repr=False)
    timeout_seconds: float = 15.0
    #: Znodes read per second (``LEDGERGC_ZK_MAX_READS_PER_SECOND``; 0: no bound). A
    #: Spark task's endpoint carries its share (``share``).
    max_reads_per_second: float = 0.0
    #: The largest record a write sends (``LEDGERGC_ZK_MAX_RECORD_BYTES``).
    max_record_bytes: int = DEFAULT_ZK_MAX_RECORD_BYTES
    #: Whose ensemble this is (``PULSAR`` or ``BOOKKEEPER``); not part of its identity.
    ensemble: str = field(default=PULSAR, compare=False)
    #: The variable of each part of ``security`` and of the servers, for errors
    #: (``LEDGERGC_BK_ZK_*`` on BookKeeper's ensemble); no value travels with it.
    names: Names = field(default=PULSAR_NAMES, compare=False, repr=False)
    #: The variable that named the servers (``LEDGERGC_ZK_HOSTS``/``LEDGERGC_BK_ZK_HOSTS``).
    hosts_variable: str = field(default="LEDGERGC_ZK_HOSTS", compare=False, repr=False)

    @property
    def hosts(self) -> str:
        """kazoo's connect string, the chroot included: ``h1:2181,h2:2181/chroot``."""
        return self.address.hosts

    @property
    def chroot(self) -> str:
        return self.address.chroot

    def login(self) -> ZooKeeperLogin | None:
        """The SASL login (None: no SASL), read once."""
        return self.security.login(self.names)

    def share(self, tasks: int) -> ZkEndpoint:
        """This endpoint for one of ``tasks`` Spark tasks reading at once: its share of
        the read budget, so that together they read no more than it."""
        if self.max_reads_per_second <= 0:
            return self
        return replace(self, max_reads_per_second=self.max_reads_per_second / max(1, tasks))

    def __getstate__(self) -> dict[str, Any]:
        """A pickled copy (a Spark closure) needs no file of this host: its TLS material as
        PEM text, a JAAS login as its username and password (``ZkSecurity.portable``)."""
        return {**self.__dict__, "security": self.security.portable(self.names)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _arrived(self, state)

    def secrets(self) -> list[str]:
        """What of this endpoint a log must never show: the digest's password and the
        digest ZooKeeper derives from it, the TLS key and its stores' passwords, the SASL
        password (a JAAS file's too)."""
        security = self.security
        found = [spec.secret_of(getattr(security, str(spec.part))) for spec in _SECURITY_SPECS]
        found += digest_secrets(self.digest)
        found.append(login_password(security, self.names))
        return [value for value in found if value]

    def __repr__(self) -> str:
        security = self.security
        parts = [self.ensemble, repr(self.hosts)]
        if security.uses_tls:
            parts.append("tls")
        if security.uses_sasl:
            parts.append(f"sasl={security.sasl_mechanism or 'jaas'}")
        if self.digest:
            parts.append("digest")
        return f"ZkEndpoint({', '.join(parts)})"


@dataclass(frozen=True)
class BookKeeperEndpoint:
    """BookKeeper's ledger metadata: its ensemble, its ledgers root and ledger manager."""

    zk: ZkEndpoint
    #: The ledgers root below the chroot (``zkLedgersRootPath``).
    root: str = "/ledgers"
    #: The ledger manager a ``zk+<manager>://`` address names (None: ``LAYOUT`` decides).
    manager: str | None = None
    #: The address's variable and its value as written, for the error of a manager that
    #: ``LAYOUT`` contradicts.
    address_given: str = field(default="", compare=False, repr=False)

    @property
    def hosts(self) -> str:
        return self.zk.hosts

    @property
    def where(self) -> str:
        """``hosts`` and root, as messages name the tree: ``h1:2181/chroot/ledgers``."""
        return f"{self.zk.hosts}{self.root}"


@dataclass(frozen=True)
class ObjectStore:
    """One bucket of an object store under a prefix, and how to reach it: the block
    store (``LEDGERGC_BUCKET``, always S3) or Pulsar's tiered storage
    (``LEDGERGC_OFFLOAD_*``: S3, Google Cloud Storage or Azure Blob Storage, ``driver``).
    An empty ``bucket``: that store is off. Its credentials (None: the store's SDK's
    default chain) stay out of its ``repr``; what crosses to a Spark executor is
    short-lived (an S3 session, a GCS access token, an Azure SAS), never a key file."""

    bucket: str
    prefix: str = ""
    #: The endpoint URL (None: the cloud's own).
    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    #: ``s3``, ``gcs`` or ``azure`` (``storage.offload_bucket``: S3, GCS, AZURE).
    driver: str = "s3"
    #: GCS: an OAuth2 access token (minted at the edge from a key, ADC or workload
    #: identity) and the project; neither set: anonymous (an emulator) or ADC.
    gcs_token: str | None = field(default=None, repr=False)
    gcs_project: str | None = None
    #: Azure: the storage account, and one of its account key, a SAS token (a user
    #: delegation SAS minted at the edge for a service principal or managed identity),
    #: or a connection string.
    azure_account: str | None = None
    azure_key: str | None = field(default=None, repr=False)
    azure_sas: str | None = field(default=None, repr=False)
    azure_connection_string: str | None = field(default=None, repr=False)
    #: The account's blob soft delete retention in days (0: off) when read with the key
    #: before a container SAS replaced it (None: the store reads it itself).
    azure_soft_delete_days: int | None = None

    @property
    def key_prefix(self) -> str:
        """What every key of the store starts with ("" or "prefix/")."""
        return f"{self.prefix}/" if self.prefix else ""

    def __setstate__(self, state: dict[str, Any]) -> None:
        _arrived(self, state)

    def secrets(self) -> list[str]:
        found = (
            self.secret_access_key,
            self.session_token,
            self.gcs_token,
            self.azure_key,
            self.azure_sas,
            self.azure_connection_string,
            *connection_string_secrets(self.azure_connection_string),
        )
        return [value for value in found if value]

    @property
    def configured(self) -> bool:
        return bool(self.bucket)


def check_state_dir(path: Path) -> Path:
    """Make sure the state dir exists and is writable, before anything runs.

    The audit log lives there, and a deletion that cannot be audited is not made: a
    state dir that is a file, or read-only, must stop a run before its first mark, not
    after its first delete.
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"LEDGERGC_STATE_DIR={path} is a file, not a directory; point it at a "
            "directory (it is created if missing)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"LEDGERGC_STATE_DIR={path} cannot be created ({exc.strerror}); point it at "
            "a writable directory"
        ) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            f"LEDGERGC_STATE_DIR={path} is not writable; point it at a writable directory"
        )
    return path


@dataclass(frozen=True)
class StateEndpoint:
    """The state store: ``state_url`` (None: the embedded SQLite file in ``state_dir``)
    and the state dir (its legacy files imported once). The state layer reads both by
    attribute (``state.stores.open_store``). Its ``repr`` leaves the URL out (it may
    hold a password)."""

    state_dir: Path
    state_url: str | None = field(default=None, repr=False)

    def __setstate__(self, state: dict[str, Any]) -> None:
        _arrived(self, state)

    def check_dir(self) -> Path:
        """The state dir, there and writable, before anything runs (``check_state_dir``)."""
        return check_state_dir(Path(self.state_dir))

    def secrets(self) -> list[str]:
        """The URL's password as written and as the database gets it (unescaped)."""
        if not self.state_url:
            return []
        found = (written_password(self.state_url), password(self.state_url))
        return [value for value in found if value]


@dataclass(frozen=True)
class Endpoints:
    """What one command or task talks to, and the policy it decides by, resolved once
    from its settings (``edge.resolve``)."""

    zk: ZkEndpoint
    bookkeeper: BookKeeperEndpoint
    #: The block store (``LEDGERGC_BUCKET``; empty: none) and tiered storage.
    blocks: ObjectStore = field(default_factory=lambda: ObjectStore(""))
    offload: ObjectStore = field(default_factory=lambda: ObjectStore(""))
    state: StateEndpoint = field(default_factory=lambda: StateEndpoint(Path("var/state")))
    policy: Policy = field(default_factory=Policy)
    #: ``LEDGERGC_BOOKKEEPER``: ``auto`` (BookKeeper's metadata surveyed, and its orphans
    #: deleted, when its ``LAYOUT`` is there), ``true`` (refused without one), ``false``.
    bookkeeper_mode: str = "auto"
    #: Pulsar's configuration store (``LEDGERGC_CONFIG_STORE_HOSTS`` and its TLS and SASL
    #: parts, from broker.conf's ``configurationMetadataStoreUrl`` when unset): tenants,
    #: namespaces' policies, partitioned-topic metadata. None: the local store (``zk``).
    config_store: ZkEndpoint | None = None
    #: ``LEDGERGC_PULSAR_METADATA``: ``auto`` (on when ``/managed-ledgers`` exists),
    #: ``true``, ``false``: the Pulsar-metadata source (DESIGN.md "Pulsar's own metadata").
    pulsar_metadata_mode: str = "auto"
    #: Whether a configuration store was given (``LEDGERGC_CONFIG_STORE_HOSTS``, or
    #: broker.conf's keys), even one that is the local store (``config_store`` None): the
    #: source then refuses a store without ``/admin/policies`` rather than turn off.
    config_store_given: bool = False

    @property
    def bookkeeper_on(self) -> bool:
        return self.bookkeeper_mode != "false"

    @property
    def configuration(self) -> ZkEndpoint:
        """The configuration store's endpoint: its own, else the local store's."""
        return self.config_store or self.zk

    @property
    def pulsar_metadata_on(self) -> bool:
        return self.pulsar_metadata_mode != "false"


#: The declarations of a ``ZkSecurity``'s parts: which of them hold a secret.
_SECURITY_SPECS = security_specs(PULSAR_PREFIX)


def _arrived(endpoint: ZkEndpoint | ObjectStore | StateEndpoint, state: dict[str, Any]) -> None:
    """A pickled endpoint arrives (on a Spark executor, the one way one reaches another
    process): its fields, and its secrets masked in that process's logs from now on,
    as its edge's are (``config.secret_masking``)."""
    for name, value in state.items():
        object.__setattr__(endpoint, name, value)
    install_secret_masking(endpoint.secrets())
