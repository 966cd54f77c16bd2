"""Every secret value a Settings object holds, declared and derived: what a process masks.

``Settings.secrets`` gives the parts of the settings declared secret (``SECRET_*`` in
``settings_schema``: a password, a key, a token, a state URL's password as written). A
client also sends, and its debug log shows, values derived from them that no setting
holds as such; they are secrets too:

* the state URL's password as the database gets it (SQLAlchemy unescapes ``%40``...);
* the digest ZooKeeper and kazoo compute from ``LEDGERGC_ZK_DIGEST``'s ``user:password``,
  ``base64(sha1(user:password))`` (a digest ACL's id: open to a dictionary attack);
* the DIGEST-MD5 password of each ensemble's login (the local store's, BookKeeper's,
  the configuration store's), when a JAAS file holds it (the settings hold the file's
  path).

``install_for(settings)`` hands them all to the process's log masker
(``ledger_gc.config.secret_masking``): what the command, a task and a Spark application call
once they have their settings.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Protocol

from ledger_gc.config.secret_masking import install_secret_masking
from ledger_gc.config.zk_security import PULSAR_PREFIX, Names
from ledger_gc.errors import ConfigError
from ledger_gc.state.url import password

if TYPE_CHECKING:
    from ledger_gc.config.zk_security import ZkSecurity


class Settings(Protocol):
    """What of ``config.settings.Settings`` this reads (by attribute: the settings module
    calls it when a copy is unpickled, so it cannot import that module back)."""

    @property
    def state_url(self) -> str | None: ...

    @property
    def zk_digest(self) -> str | None: ...

    @property
    def zk_security(self) -> ZkSecurity: ...

    @property
    def bookkeeper_security(self) -> ZkSecurity: ...

    @property
    def configuration_security(self) -> ZkSecurity: ...

    @property
    def configuration_digest(self) -> str | None: ...

    @property
    def azure_storage_connection_string(self) -> str | None: ...

    def secrets(self) -> list[str]: ...


def zookeeper_digest(user: str, secret: str) -> str:
    """ZooKeeper's digest of ``user:secret`` (``DigestAuthenticationProvider``): the
    base64 of its SHA-1, as a digest ACL's id carries it after ``user:``."""
    digest = hashlib.sha1(f"{user}:{secret}".encode()).digest()
    return base64.b64encode(digest).decode("ascii")


def secret_values(settings: Settings) -> list[str]:
    """The secret values of ``settings``: the declared ones, then the derived ones."""
    found = list(settings.secrets())
    if settings.state_url:
        found.append(password(settings.state_url) or "")
    found += digest_secrets(settings.zk_digest)
    found += digest_secrets(settings.configuration_digest)
    found += connection_string_secrets(settings.azure_storage_connection_string)
    for security in (
        settings.zk_security,
        settings.bookkeeper_security,
        settings.configuration_security,
    ):
        found.append(login_password(security) or "")
    return [value for value in dict.fromkeys(found) if value]


def digest_secrets(digest: str | None) -> list[str]:
    """What of ZooKeeper digest auth (``user:password``) a log must not show: the
    password, and the digest ZooKeeper derives from it (kazoo logs a digest ACL's id)."""
    if not digest or ":" not in digest:
        return []
    user, _, secret = digest.partition(":")
    return [secret, zookeeper_digest(user, secret)]


#: The parts of an Azure Storage connection string that are secrets.
CONNECTION_STRING_SECRETS = ("accountkey", "sharedaccesssignature")


def connection_string_secrets(connection_string: str | None) -> list[str]:
    """What of an Azure Storage connection string a log must not show besides the whole:
    its ``AccountKey`` and ``SharedAccessSignature`` (an SDK's error may quote either)."""
    found = []
    for part in (connection_string or "").split(";"):
        name, _, value = part.partition("=")
        if name.strip().lower() in CONNECTION_STRING_SECRETS and value.strip():
            found.append(value.strip())
    return found


def login_password(security: ZkSecurity, names: Names | None = None) -> str | None:
    """The DIGEST-MD5 password of an ensemble's login (its settings' or its JAAS
    file's, read once when the settings were checked); ``names`` only words errors,
    which are not raised here."""
    try:
        login = security.login(names or Names(PULSAR_PREFIX))
    except ConfigError:  # refused when the settings were made; nothing to mask
        return None
    return login.password if login is not None else None


def install_for(settings: Settings) -> None:
    """Mask every secret of ``settings`` in every log record of this process."""
    install_secret_masking(secret_values(settings))
