"""A throwaway certificate authority for tests of ZooKeeper TLS settings (no server).

Made in-process with ``cryptography`` (EC keys: milliseconds). The integration tests that
start a real secure ZooKeeper make theirs with ``openssl`` and ``keytool``, as an
operator would (``tests/integration/zk_pki.py``).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    pkcs12,
)
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Issued:
    """A certificate and its key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(Encoding.PEM).decode()

    def key_pem(self, password: str | None = None) -> str:
        encryption = BestAvailableEncryption(password.encode()) if password else NoEncryption()
        return self.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, encryption).decode()

    def pkcs12(self, password: str, ca: Issued | None = None) -> bytes:
        """A keystore as a broker keeps it: the key, its certificate, the CA's."""
        return pkcs12.serialize_key_and_certificates(
            b"client",
            self.key,
            self.cert,
            [ca.cert] if ca else None,
            BestAvailableEncryption(password.encode()),
        )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(common_name: str, issuer: Issued | None = None, *, ca: bool = False) -> Issued:
    """A certificate for ``common_name`` (127.0.0.1 and localhost), signed by ``issuer``
    (None: self-signed)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(issuer.cert.subject if issuer else _name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    signer = issuer.key if issuer else key
    return Issued(builder.sign(signer, hashes.SHA256()), key)


def truststore(ca: Issued, password: str) -> bytes:
    """A PKCS12 truststore holding the CA's certificate only."""
    return pkcs12.serialize_key_and_certificates(
        None, None, None, [ca.cert], BestAvailableEncryption(password.encode())
    )


CA = issue("ledger-gc test CA", ca=True)
CLIENT = issue("ledger-gc", CA)
OTHER = issue("someone else", CA)
