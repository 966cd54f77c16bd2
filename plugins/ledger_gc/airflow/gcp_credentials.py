"""Google Cloud Storage credentials of ledger-gc's tasks, through the Google provider's
``GCSHook``.

The ``google_cloud_default`` connection (type ``google_cloud_platform``; another id by
``LedgerGcHook(gcs_conn_id=...)``) is read the way every Google operator reads its
connection, so each identity the provider knows works here too: a key file
(``extra.key_path``), a key's JSON (``extra.keyfile_dict``), a credential configuration
file (workload identity federation, ``extra.credential_config_file``), impersonation
(``extra.impersonation_chain``), or none of these: application default credentials
(a GKE workload identity, the worker's metadata server, ``GOOGLE_APPLICATION_CREDENTIALS``).

What leaves the worker is an OAuth2 access token (an hour, as Google issues them), minted
here once for the task (``LEDGERGC_OFFLOAD_GCS_TOKEN``, a secret setting: masked in
logs, and refused where the Spark provider would put it on spark-submit's command line,
``orphan_tasks.check_spark_master``): never a key, a key file or a path to one. Without
the connection, the brokers' own key file (``LEDGERGC_OFFLOAD_GCS_KEY_FILE``, from
broker.conf's ``gcsManagedLedgerOffloadServiceAccountKeyFile``) is exchanged for a token
here likewise. With neither, and an endpoint (fake-gcs-server), the store is reached
anonymously; with neither and Google's own endpoint, each process uses its own
application default credentials.
"""

from __future__ import annotations

import logging
from typing import Any

from ledger_gc.config import gcs_key_file
from ledger_gc.config.settings import Settings
from ledger_gc.config.spark_credentials import reason
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage.offload_drivers import GCS, family

log = logging.getLogger(__name__)

GCS_CONN_ID = "google_cloud_default"


def connection_hook(connection: Any) -> Any:
    """The provider's ``GCSHook`` over a connection already read (no second lookup)."""
    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    class ConnectionGcsHook(GCSHook):
        def get_connection(self, conn_id: str) -> Any:  # type: ignore[override]
            return connection

    return ConnectionGcsHook(gcp_conn_id=connection.conn_id)


def access_token(connection: Any) -> tuple[str, str | None]:
    """``(token, project)`` of ``connection``'s identity, as the provider resolves it;
    one ``ConfigError`` naming the connection when it cannot (never the key)."""
    try:
        from google.auth.transport.requests import Request

        credentials, project = connection_hook(connection).get_credentials_and_project_id()
        credentials.refresh(Request())
    except ImportError as exc:
        raise ConfigError(
            f"Airflow connection {connection.conn_id}: the Google provider "
            "(apache-airflow-providers-google, requirements.txt) is not installed"
        ) from exc
    except Exception as exc:  # google.auth's and the provider's errors alike
        raise ConfigError(
            f"Airflow connection {connection.conn_id}: minting a GCS access token failed "
            f"({reason(exc)}); check its key_path, keyfile_dict, credential_config_file "
            "or the worker's application default credentials"
        ) from exc
    return str(credentials.token), (project or None)


def names_identity(connection: Any) -> bool:
    """Whether the connection names an identity of its own (else: ADC)."""
    extra = connection.extra_dejson or {}
    keys = ("key_path", "keyfile_dict", "credential_config_file", "impersonation_chain")
    prefixed = {key.removeprefix("extra__google_cloud_platform__") for key in extra if extra[key]}
    return bool(prefixed & set(keys))


def with_gcs_token(settings: Settings, connection: Any | None) -> Settings:
    """``settings`` with a GCS access token (``offload_gcs_token``) when tiered storage is
    on GCS and none is given: from the connection (any identity it names, or ADC when it
    names none and the store is Google's), else from the brokers' key file. Unchanged
    otherwise (an emulator's endpoint without credentials: anonymous)."""
    if family(settings.offload_driver) != GCS or not settings.offload_bucket:
        return settings
    if settings.offload_gcs_token:
        return settings
    if connection is not None and (names_identity(connection) or not settings.offload_endpoint):
        token, project = access_token(connection)
        source, detail = "connection", f"{connection.conn_id} (GCSHook)"
    elif settings.offload_gcs_key_file is not None:
        token, project = gcs_key_file.access_token(settings.offload_gcs_key_file)
        source, detail = "gcs-key-file", "LEDGERGC_OFFLOAD_GCS_KEY_FILE"
    else:
        return settings
    log.info("GCS access token minted from %s for this task", detail)
    changes: dict[str, Any] = {"offload_gcs_token": token}
    if project and not settings.offload_gcs_project:
        changes["offload_gcs_project"] = project
    return settings.overridden_by(source, detail, changes)
