"""Azure Blob Storage credentials of ledger-gc's tasks, through the Microsoft Azure
provider's ``WasbHook``.

The ``wasb_default`` connection (type ``wasb``; another id by
``LedgerGcHook(wasb_conn_id=...)``) is read the way every Azure operator reads it, so each
identity the provider knows works here too: a connection string
(``extra.connection_string``), the account name (login) with its key (password, or
``extra.shared_access_key``), a SAS (``extra.sas_token``), a service principal
(``extra.tenant_id`` with the client id and secret as login and password), or none of
these: ``DefaultAzureCredential`` (a managed identity, workload identity,
``extra.managed_identity_client_id``). The provider builds its ``BlobServiceClient``;
what its credential is decides what the settings carry:

* an account key: the account and the key (``AZURE_STORAGE_ACCOUNT``,
  ``AZURE_STORAGE_ACCESS_KEY``, as Pulsar's brokers read them), and the account's
  endpoint (``LEDGERGC_OFFLOAD_ENDPOINT``: Azurite's, a sovereign cloud's);
* a SAS: the SAS (``LEDGERGC_OFFLOAD_AZURE_SAS``);
* an Azure AD login (service principal, managed or workload identity): a *user
  delegation SAS* for the container, minted now from a user delegation key that the
  login asks the account for (``SAS_SECONDS``): the login's own token never leaves.

And what a Spark application on a cluster gets (``for_spark``): never the account key.
It is exchanged on this worker for a SAS of the offload container of ``SAS_SECONDS``
(signed with the key; list, read, delete only; the account's soft delete read with the
key and handed on beside it; the library's ``config.spark_credentials``, which the
``ledgergc`` command run against a cluster calls too), and the key and any connection
string are left out. With a local master the executors are this worker's processes and
get the settings as they are (as ``aws_credentials`` does). Every SAS is a secret
setting: masked in logs, and refused where the Spark provider would put it on
spark-submit's command line (``orphan_tasks.check_spark_master``).
"""

from __future__ import annotations

import logging
from typing import Any

from ledger_gc.config import spark_credentials
from ledger_gc.config.settings import Settings
from ledger_gc.config.spark_credentials import reason
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage.offload_drivers import AZURE, family
from ledger_gc.storage.offload_buckets import account_soft_delete_days

log = logging.getLogger(__name__)

WASB_CONN_ID = "wasb_default"
#: How long a SAS minted for a task lasts (a cycle's survey and delete fit in it).
SAS_SECONDS = spark_credentials.SAS_SECONDS


def connection_hook(connection: Any) -> Any:
    """The provider's ``WasbHook`` over a connection already read (no second lookup)."""
    from airflow.providers.microsoft.azure.hooks.wasb import WasbHook

    class ConnectionWasbHook(WasbHook):
        def get_connection(self, conn_id: str) -> Any:  # type: ignore[override]
            return connection

    return ConnectionWasbHook(wasb_conn_id=connection.conn_id)


def with_azure_credentials(settings: Settings, connection: Any | None) -> Settings:
    """``settings`` with the Azure credentials of ``connection`` (see the module's
    docstring) when tiered storage is on Azure; unchanged without the connection (the
    ``AZURE_STORAGE_*`` variables, or ``DefaultAzureCredential`` in each process)."""
    if family(settings.offload_driver) != AZURE or not settings.offload_bucket:
        return settings
    if connection is None:
        return settings
    try:
        client = connection_hook(connection).get_conn()
    except ImportError as exc:
        raise ConfigError(
            f"Airflow connection {connection.conn_id}: the Microsoft Azure provider "
            "(apache-airflow-providers-microsoft-azure, requirements.txt) is not installed"
        ) from exc
    except Exception as exc:  # the provider's and the SDK's errors (a bad connection string)
        raise ConfigError(
            f"Airflow connection {connection.conn_id}: no Blob Storage client can be made of "
            f"it ({reason(exc)}); check its connection_string, login, key or sas_token"
        ) from exc
    changes: dict[str, Any] = {"azure_storage_account": client.account_name}
    if not settings.offload_endpoint:
        changes["offload_endpoint"] = account_url(client)
    credential = client.credential
    query = str(getattr(client, "_query_str", "") or "")
    if hasattr(credential, "account_key"):  # the SDK's shared key credential
        changes["azure_storage_key"] = credential.account_key
    elif hasattr(credential, "signature"):  # AzureSasCredential
        changes["azure_storage_sas"] = credential.signature
    elif credential is None and query:  # a SAS in the account URL
        changes["azure_storage_sas"] = query.lstrip("?")
    elif hasattr(credential, "get_token"):  # an Azure AD login
        changes["azure_storage_sas"] = user_delegation_sas(
            client, settings.offload_bucket, connection.conn_id
        )
    return settings.overridden_by("connection", f"{connection.conn_id} (WasbHook)", changes)


def account_url(client: Any) -> str:
    """The account's blob endpoint, without a SAS (``https://<account>.blob...``)."""
    return str(client.primary_endpoint).split("?", 1)[0].rstrip("/")


def user_delegation_sas(client: Any, container: str, conn_id: str) -> str:
    """A SAS for ``container`` signed with a user delegation key that the client's Azure
    AD login gets from the account (the login needs a role that may get one, e.g.
    Storage Blob Data Contributor); one line naming the connection on a refusal."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    start, expiry = spark_credentials.sas_window()
    try:
        key = client.get_user_delegation_key(start, expiry)
    except Exception as exc:  # azure.core's HttpResponseError, ClientAuthenticationError
        raise ConfigError(
            f"Airflow connection {conn_id}: getting a user delegation key for a SAS failed "
            f"({reason(exc)}); give the login a role on the account that may (Storage "
            "Blob Data Contributor)"
        ) from exc
    log.info("user delegation SAS minted for container %s, until %s", container, expiry)
    return str(
        generate_container_sas(
            client.account_name,
            container,
            user_delegation_key=key,
            permission=ContainerSasPermissions(
                read=True, write=True, delete=True, list=True, delete_previous_version=True
            ),
            expiry=expiry,
            start=start,
        )
    )


def for_spark(settings: Settings, *, local_master: bool) -> Settings:
    """The settings a Spark application is handed: on a cluster, a SAS of the offload
    container in place of the account key (and of a connection string that holds one),
    with the account's soft delete read with the key. The exchange is the library's
    (``config.spark_credentials.azure_for_spark``), which the ``ledgergc`` command run
    against a cluster makes too."""
    return spark_credentials.azure_for_spark(
        settings, local_master=local_master, soft_delete_days=account_soft_delete_days
    )
