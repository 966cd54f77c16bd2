"""The PEM files kazoo's TLS loads, made from the settings' material.

kazoo builds its ``ssl.SSLContext`` from file paths (``ca``, ``certfile``, ``keyfile``),
and the settings may hold PEM text (how the material reaches a Spark executor, where the
driver's paths do not exist) or a PKCS12 store (how brokers keep it). So the material is
loaded and checked (``ledger_gc.tls_material``) and written once per process into a
private directory (mode 0700, files 0600, the key unencrypted there as it is in memory),
removed when the process exits. A session re-reads them on each reconnection, so they
stay for the life of the process.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass

from ledger_gc.tls_material import load_ca, load_client
from ledger_gc.zk_security import Names, ZkSecurity


@dataclass(frozen=True)
class TlsFiles:
    """Paths for kazoo: the CAs to trust, the client certificate chain and its key."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None


_lock = threading.Lock()
_state: dict[str, str] = {}  # content digest -> path; "" -> the directory; "pid" -> its owner


def tls_files(security: ZkSecurity, names: Names) -> TlsFiles:
    """The files of ``security``'s TLS material (each None where not configured)."""
    ca = (
        load_ca(security.tls_ca, security.tls_truststore_password, names)
        if security.tls_ca
        else None
    )
    client = (
        load_client(security.tls_cert, security.tls_key, security.tls_keystore_password, names)
        if security.tls_cert
        else None
    )
    return TlsFiles(
        ca=_written(ca) if ca else None,
        cert=_written(client.chain) if client else None,
        key=_written(client.key) if client else None,
    )


def _directory() -> str:
    """This process's private directory (a forked child makes its own: its parent may
    remove the one it inherited)."""
    pid = str(os.getpid())
    directory = _state.get("")
    if directory and _state.get("pid") == pid and os.path.isdir(directory):
        return directory
    for key in [key for key in _state if key not in ("", "pid")]:
        del _state[key]
    directory = tempfile.mkdtemp(prefix="ledgergc-zk-tls-")  # mode 0700
    _state[""] = directory
    _state["pid"] = pid
    atexit.register(shutil.rmtree, directory, True)
    return directory


def _written(data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    with _lock:
        directory = _directory()
        path = _state.get(digest)
        if path is not None and os.path.isfile(path):
            return path
        path = os.path.join(directory, f"{digest[:24]}.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        _state[digest] = path
        return path
