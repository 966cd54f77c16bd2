"""A local AWS STS endpoint (moto's server): where the tests assume roles.

The Amazon provider's ``AwsBaseHook`` assumes a connection's ``role_arn`` (or exchanges
a web identity token, as IRSA does on Kubernetes) by calling STS. moto's server answers
those calls on loopback with temporary credentials shaped as AWS's (an ``ASIA…`` key id,
a secret, a session token), so the tests can follow the credentials a real role gives
from the hook to the Spark applications. It checks no signature and no trust policy:
the tests show which credentials flow where, not IAM's rules.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import ClassVar

from local_stack.server_process import LOOPBACK, ServerProcess


class MotoStsServer(ServerProcess):
    """``python -m moto.server`` on 127.0.0.1 (every moto service; the tests use STS)."""

    name: ClassVar[str] = "moto"
    log_name: ClassVar[str] = "moto.log"
    stop_timeout: ClassVar[float] = 5.0

    def __init__(self, log_dir: Path, port: int | None = None, start_timeout: float = 60.0):
        super().__init__(port, log_dir, start_timeout)

    @property
    def endpoint(self) -> str:
        """The endpoint URL to give boto3 (``service_config.sts.endpoint_url``)."""
        return f"http://{LOOPBACK}:{self.port}"

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)]

    def _env(self) -> dict[str, str]:
        # No AWS variable of the developer's reaches it (it would not use them anyway).
        return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}

    def _is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False
