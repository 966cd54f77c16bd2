"""A ZooKeeper client's TLS material, read from what operators have: PEM or PKCS12.

Pulsar brokers keep ZooKeeper's TLS material in Java keystores
(``zookeeper.ssl.keyStore.location``, ``zookeeper.ssl.trustStore.location``), PKCS12 by
default since Java 9, or in PEM files. Python's ``ssl`` (which kazoo uses) loads PEM
files only, so each setting here takes:

* PEM, as a file's path or as the PEM text itself (``-----BEGIN ...``): the text form is
  how the material reaches a Spark executor, where the driver's paths may not exist;
* a PKCS12 store's path (``.p12``/``.pfx``, or any file that is not PEM), opened with its
  password and converted with ``cryptography``;
* a JKS store is refused with the ``keytool`` command that converts it (reading JKS would
  need another library; PKCS12 has been Java's default keystore type since Java 9).

Everything comes back as PEM bytes, checked: the CA holds certificates, the client key
belongs to the client certificate. Each error is one ``ConfigError`` naming the setting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ledger_gc.errors import ConfigError

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization.pkcs12 import PKCS12KeyAndCertificates

PEM_MARK = "-----BEGIN"
_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS

#: Names a part of the settings (``tls_ca``) by its variable (``LEDGERGC_ZK_TLS_CA``).
Names = Callable[[str], str]


@dataclass(frozen=True)
class ClientCertificate:
    """The client's certificate chain and its private key, both PEM (key unencrypted)."""

    chain: bytes
    key: bytes

    def encrypted_key(self, password: bytes) -> bytes:
        """The key as PEM encrypted with ``password``: the only form in which it may
        touch a disk (``ssl`` loads a key from a file only)."""
        from cryptography.hazmat.primitives.serialization import (
            BestAvailableEncryption,
            Encoding,
            PrivateFormat,
            load_pem_private_key,
        )

        key = load_pem_private_key(self.key, None)
        return key.private_bytes(
            Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(password)
        )


def is_inline(value: str) -> bool:
    """Whether a setting's value is PEM text rather than a path."""
    return value.lstrip().startswith(PEM_MARK)


def read_source(value: str, name: str) -> bytes:
    """The bytes a setting names: its PEM text, or the file at its path."""
    if is_inline(value):
        return value.strip().encode("ascii", errors="replace") + b"\n"
    path = Path(value).expanduser()
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"{name}={value} does not exist; give a PEM file's path, its PEM text, or a "
            "PKCS12 store's path"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"{name}={value} is a directory, not a PEM file or a store") from None
    except OSError as exc:
        raise ConfigError(f"{name}={value} cannot be read ({exc.strerror})") from None


def _refuse_jks(data: bytes, value: str, name: str) -> None:
    if data[:4] in _JKS_MAGIC:
        raise ConfigError(
            f"{name}={value} is a JKS keystore, which ledger-gc does not read; convert it: "
            f"keytool -importkeystore -srckeystore {value} -srcstoretype JKS "
            f"-destkeystore {Path(value).with_suffix('.p12')} -deststoretype PKCS12"
        )


def _password(password: str | None) -> bytes | None:
    return password.encode() if password else None


def load_ca(value: str, password: str | None, names: Names) -> bytes:
    """The certificates to trust (PEM): a PEM bundle, or a PKCS12 truststore's certs."""
    from cryptography.hazmat.primitives.serialization import Encoding

    name = names("tls_ca")
    data = read_source(value, name)
    if PEM_MARK.encode() in data:
        certs = _pem_certificates(data, value, name)
        return b"".join(cert.public_bytes(Encoding.PEM) for cert in certs)
    _refuse_jks(data, value, name)
    store = _pkcs12(data, value, password, name, names("tls_truststore_password"))
    certs = [entry.certificate for entry in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate)
    if not certs:
        raise ConfigError(f"{name}={value} is a PKCS12 store with no certificate to trust")
    return b"".join(cert.public_bytes(Encoding.PEM) for cert in certs)


def load_client(
    cert_value: str, key_value: str | None, password: str | None, names: Names
) -> ClientCertificate:
    """The client certificate and key: PEM (the key in the cert's file, or its own), or a
    PKCS12 keystore holding both."""
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
        load_pem_private_key,
    )

    cert_name, key_name = names("tls_cert"), names("tls_key")
    password_name = names("tls_keystore_password")
    data = read_source(cert_value, cert_name)
    if PEM_MARK.encode() in data:
        chain = _pem_certificates(data, cert_value, cert_name)
        key_data = read_source(key_value, key_name) if key_value else data
        if b"PRIVATE KEY" not in key_data:
            raise ConfigError(
                f"{cert_name} is set but {key_name} is not: set it to the client's PEM key "
                "(a server that asks for a client certificate needs both)"
            )
        where = key_name if key_value else cert_name
        try:
            key = load_pem_private_key(key_data, _password(password))
        except TypeError:
            raise ConfigError(
                f"{where} is an encrypted key: set {password_name} to its password"
            ) from None
        except ValueError as exc:
            raise ConfigError(
                f"{where} is not a PEM private key, or {password_name} is not its password ({exc})"
            ) from None
    else:
        _refuse_jks(data, cert_value, cert_name)
        if key_value:
            raise ConfigError(
                f"{cert_name}={cert_value} is a PKCS12 keystore, which holds the key: unset "
                f"{key_name}"
            )
        store = _pkcs12(data, cert_value, password, cert_name, password_name)
        if store.key is None or store.cert is None:
            raise ConfigError(
                f"{cert_name}={cert_value} is a PKCS12 store without a private key and its "
                "certificate (a truststore?); give the broker's keystore"
            )
        key = store.key
        chain = [store.cert.certificate, *(c.certificate for c in store.additional_certs)]
    spki = PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(Encoding.PEM, spki) != key.public_key().public_bytes(
        Encoding.PEM, spki
    ):
        raise ConfigError(
            f"the key of {key_name if key_value else cert_name} does not belong to the "
            f"certificate of {cert_name}"
        )
    return ClientCertificate(
        chain=b"".join(cert.public_bytes(Encoding.PEM) for cert in chain),
        key=key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()),
    )


def _pkcs12(
    data: bytes, value: str, password: str | None, name: str, password_name: str
) -> PKCS12KeyAndCertificates:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(data, _password(password))
    except ValueError:
        state = "is not its password" if password else "is not set"
        raise ConfigError(
            f"{name}={value} is neither PEM nor a PKCS12 store it can open ({password_name} "
            f"{state})"
        ) from None


def _pem_certificates(data: bytes, value: str, name: str) -> list[x509.Certificate]:
    """The certificates of a PEM text, or one line naming the setting."""
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ConfigError(f"{name}={_shown(value)} holds no PEM certificate ({exc})") from None


def _shown(value: str) -> str:
    """A value for an error line: a path as it is, PEM text as a mark only."""
    return "(PEM text)" if is_inline(value) else value
