"""Certificates for a TLS ZooKeeper, made as an operator makes them: ``openssl`` and
``keytool``.

A CA signs the server's certificate (for 127.0.0.1 and localhost) and a client's; the
server gets a PKCS12 keystore (``openssl pkcs12 -export``: a key entry, which Java
reads) and a truststore made by ``keytool -importcert`` (OpenSSL 3's certificate-only
PKCS12 files read as empty in Java). The client's material exists in every form ledger-gc
takes: PEM files, a PKCS12 keystore, the truststore. A second CA, which nobody trusts,
signs the certificates of the tests that must be refused.

``dated_certificate`` (and ``dated_server_keystore``, a server's keystore of one) makes
a certificate the right CA signed whose validity is elsewhere in time (expired, or not
valid yet), with ``openssl ca`` and its ``-startdate``/``-enddate``, as a forgotten
renewal or a clock that is off leaves a server or a client.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

PASSWORD = "changeit"
_SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost"


def _run(*args: str, cwd: Path) -> None:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")


def _keytool() -> str:
    found = shutil.which("keytool")
    if found is None:
        raise RuntimeError("keytool not found (the JDK's); install openjdk-17-jdk-headless")
    return found


@dataclass(frozen=True)
class Pki:
    """The files a test needs, all in ``directory``."""

    directory: Path

    def __getattr__(self, name: str) -> Path:
        return self.directory / _FILES[name]


_FILES = {
    "ca": "ca.pem",
    "server_keystore": "server.p12",
    "truststore": "truststore.p12",
    "client_cert": "client.pem",
    "client_key": "client.key",
    "client_keystore": "client.p12",
    "rogue_ca": "rogue-ca.pem",
    "rogue_cert": "rogue-client.pem",
    "rogue_key": "rogue-client.key",
}


def _ca(directory: Path, name: str, subject: str) -> None:
    _run(
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN={subject}",
        cwd=directory,
    )  # fmt: skip


def _signed(directory: Path, name: str, subject: str, ca: str, *, san: bool) -> None:
    _run(
        "openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={subject}",
        cwd=directory,
    )  # fmt: skip
    extensions = directory / f"{name}.ext"
    extensions.write_text(_SAN + "\n" if san else "basicConstraints=CA:FALSE\n")
    _run(
        "openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
        f"{ca}.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
        "-extfile", extensions.name,
        cwd=directory,
    )  # fmt: skip


def _pkcs12(directory: Path, name: str, alias: str) -> None:
    _run(
        "openssl", "pkcs12", "-export", "-in", f"{name}.pem", "-inkey", f"{name}.key",
        "-certfile", "ca.pem", "-name", alias, "-out", f"{name}.p12",
        "-passout", f"pass:{PASSWORD}",
        cwd=directory,
    )  # fmt: skip


def make_pki(directory: Path) -> Pki:
    """A CA, the server's keystore and truststore, the client's material, a rogue CA."""
    directory.mkdir(parents=True, exist_ok=True)
    _ca(directory, "ca", "ledger-gc test CA")
    _signed(directory, "server", "zookeeper", "ca", san=True)
    _pkcs12(directory, "server", "zookeeper")
    _run(
        _keytool(), "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem",
        "-keystore", "truststore.p12", "-storetype", "PKCS12", "-storepass", PASSWORD,
        cwd=directory,
    )  # fmt: skip
    _signed(directory, "client", "ledger-gc", "ca", san=False)
    _pkcs12(directory, "client", "ledger-gc")
    _ca(directory, "rogue-ca", "nobody's CA")
    _signed(directory, "rogue-client", "mallory", "rogue-ca", san=False)
    return Pki(directory)


#: A minimal ``openssl ca`` set-up: any subject, the extensions of the request's file.
_CA_CONFIG = """\
[ca]
default_ca = test_ca
[test_ca]
database = ca-index.txt
new_certs_dir = .
serial = ca-serial
default_md = sha256
policy = any_subject
unique_subject = no
[any_subject]
commonName = supplied
"""


def dated_certificate(
    pki: Pki, name: str, subject: str, not_before: datetime, not_after: datetime, *, san: bool
) -> tuple[Path, Path]:
    """``<name>.pem`` and ``<name>.key``: a certificate for ``subject`` (with ``san``, for
    127.0.0.1 and localhost) that ``pki``'s CA signed, valid from ``not_before`` to
    ``not_after`` (UTC): trusted, and out of date."""
    directory = pki.directory
    (directory / "ca-config.cnf").write_text(_CA_CONFIG)
    (directory / "ca-index.txt").touch()
    serial = directory / "ca-serial"
    if not serial.exists():
        serial.write_text("1000\n")
    _run(
        "openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={subject}",
        cwd=directory,
    )  # fmt: skip
    (directory / f"{name}.ext").write_text(_SAN + "\n" if san else "basicConstraints=CA:FALSE\n")
    _run(
        "openssl", "ca", "-batch", "-notext", "-config", "ca-config.cnf", "-cert", "ca.pem",
        "-keyfile", "ca.key", "-in", f"{name}.csr", "-out", f"{name}.pem",
        "-extfile", f"{name}.ext", "-startdate", f"{not_before:%Y%m%d%H%M%S}Z",
        "-enddate", f"{not_after:%Y%m%d%H%M%S}Z",
        cwd=directory,
    )  # fmt: skip
    return directory / f"{name}.pem", directory / f"{name}.key"


def dated_server_keystore(pki: Pki, name: str, not_before: datetime, not_after: datetime) -> Path:
    """A PKCS12 server keystore (``<name>.p12``, alias ``zookeeper``) for 127.0.0.1 and
    localhost (``dated_certificate``): a certificate that is trusted, names the host, and
    is out of date."""
    dated_certificate(pki, name, "zookeeper", not_before, not_after, san=True)
    _pkcs12(pki.directory, name, "zookeeper")
    return pki.directory / f"{name}.p12"
