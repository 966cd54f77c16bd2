"""Azurite's Blob service on loopback: the local Azure Blob Storage (``AzuriteBlobServer``)."""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

from local_stack.server_process import LOOPBACK, LocalStackError, ServerProcess

# Where bin/setup installs npm's azurite (pinned by tools/azurite/package-lock.json).
AZURITE_DIR = Path(__file__).resolve().parents[2] / ".tools" / "azurite"

# Azurite's one built-in account, with the well-known key that Azure's own documentation
# publishes for its emulators: not a secret, and accepted by nothing but an emulator.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azurite_blob_script() -> Path:
    """Azurite's Blob-only entry point in the project's own npm install."""
    script = AZURITE_DIR / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
    if not script.is_file():
        raise LocalStackError(f"Azurite is not installed ({script} is missing); run bin/setup")
    return script


class AzuriteBlobServer(ServerProcess):
    """Azurite's Blob service (``azurite-blob``) on 127.0.0.1, run by the machine's Node.

    Settings that differ from its defaults, and why:

    * ``--blobHost 127.0.0.1`` (its default too, said here so it stays) on a free port
      (10000 by default).
    * ``--location data_dir``: its metadata (LokiJS) and blob extents; they survive
      ``restart()``. ``--debug`` writes its debug log into the stack's log dir.
    * ``--skipApiVersionCheck``: ``azure-storage-blob`` 12.31 sends an ``x-ms-version``
      newer than Azurite 3.35 knows, which it would refuse with 400.
    * ``--disableTelemetry``: nothing is reported anywhere. ``--silent``: no access log.

    Clients address it path-style: ``http://127.0.0.1:<port>/devstoreaccount1/<container>``
    (``connection_string``). It keeps no soft-deleted blobs and no versions: a delete is
    final (tests/integration/test_object_store_emulators.py asserts it).
    """

    name = "Azurite Blob"
    log_name = "azurite.log"
    stop_timeout = 5.0

    #: The version tools/azurite/package-lock.json pins.
    VERSION: ClassVar[str] = "3.35.0"

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        log_dir: Path | str | None = None,
        *,
        start_timeout: float = 30.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        super().__init__(port, Path(log_dir) if log_dir else self.data_dir / "logs", start_timeout)

    @property
    def account_url(self) -> str:
        """The Blob service URL of the built-in account (``BlobServiceClient(account_url)``)."""
        return f"http://{LOOPBACK}:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        """A connection string as ``WasbHook`` and ``BlobServiceClient`` take it."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.account_url};"
        )

    @property
    def debug_log_path(self) -> Path:
        """Azurite's own debug log (requests and its handling of them)."""
        return self.log_dir / "azurite-debug.log"

    def _prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def _cwd(self) -> Path:
        return self.data_dir

    def _env(self) -> dict[str, str]:
        # A developer's AZURITE_ACCOUNTS would replace the built-in account and its key.
        return {k: v for k, v in os.environ.items() if k != "AZURITE_ACCOUNTS"}

    def _command(self) -> list[str]:
        node = shutil.which("node")
        if node is None:
            raise LocalStackError("node not found on PATH; Azurite runs on Node: run bin/setup")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return [
            node,
            str(azurite_blob_script()),
            "--blobHost",
            LOOPBACK,
            "--blobPort",
            str(self.port),
            "--location",
            str(self.data_dir.resolve()),
            "--debug",
            str(self.debug_log_path.resolve()),
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
        ]

    def _is_ready(self) -> bool:
        # Any HTTP answer is Azurite serving: an unsigned request is refused (403).
        try:
            with urllib.request.urlopen(f"{self.account_url}?comp=list", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

    def client(self) -> Any:
        """An ``azure.storage.blob.BlobServiceClient`` for the built-in account."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)
