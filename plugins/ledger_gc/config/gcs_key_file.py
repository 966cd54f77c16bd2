"""A GCS service account's key file -> a short-lived access token, at the edge.

The brokers' ``gcsManagedLedgerOffloadServiceAccountKeyFile`` (``LEDGERGC_OFFLOAD_GCS_KEY_FILE``)
is a long-lived secret: it is read in the process that resolves the settings, once, and
exchanged there for an OAuth2 access token (an hour, as Google issues them), which is all
that an ``ObjectStore`` carries, and so all that reaches a Spark executor. ``google-auth``
comes with ``google-cloud-storage``; it is imported here only when a key file is set.
"""

from __future__ import annotations

from pathlib import Path

from ledger_gc.config.secret_masking import install_secret_masking
from ledger_gc.errors import ConfigError

KEY_FILE = "LEDGERGC_OFFLOAD_GCS_KEY_FILE"
#: What the token may do: read, list and delete objects (restore writes one back).
SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)


def access_token(path: Path) -> tuple[str, str | None]:
    """``(token, project)`` from the key file at ``path``; one ``ConfigError`` naming the
    setting and the fix when it cannot be read or Google refuses it (never its content)."""
    try:
        from google.auth.transport.requests import Request
        from google.oauth2 import service_account
    except ImportError as exc:
        raise ConfigError(
            f"{KEY_FILE} is set but google-auth is not installed; install "
            "google-cloud-storage (requirements.txt)"
        ) from exc
    try:
        credentials = service_account.Credentials.from_service_account_file(
            str(path), scopes=list(SCOPES)
        )
    except OSError as exc:
        raise ConfigError(
            f"{KEY_FILE}={str(path)!r} cannot be read ({exc.strerror or type(exc).__name__}); "
            "point it at the service account's JSON key file"
        ) from exc
    except (ValueError, KeyError) as exc:
        raise ConfigError(
            f"{KEY_FILE}={str(path)!r} is not a service account JSON key file "
            f"({type(exc).__name__}); download a JSON key of the service account"
        ) from exc
    try:
        credentials.refresh(Request())
    except Exception as exc:  # google.auth's RefreshError, TransportError alike
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ConfigError(
            f"{KEY_FILE}={str(path)!r}: Google refused the key or could not be reached "
            f"({type(exc).__name__}: {reason}); check the key is active and its account "
            "may use the bucket"
        ) from exc
    token = str(credentials.token)
    # Minted here, so in no settings that the edge masked: masked in this process's logs
    # from now on (an executor masks it as its ObjectStore arrives).
    install_secret_masking([token])
    return token, credentials.project_id
