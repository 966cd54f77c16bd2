"""ledger-gc's provider hook: Airflow connections, a variable and run params -> Settings.

``LedgerGcHook`` is what a provider's hook is to its client: it owns ledger-gc's
connections and turns them, with the ``ledgergc_settings`` variable and a run's params,
into the one ``Settings`` object the library takes (``get_conn``). The library never
imports Airflow; the tasks of both DAGs call ``settings_for(params)`` (the hook's settings
of a task) at run time, never at parse time, and pass the result down. Precedence, lowest
first: ``LEDGERGC_*`` environment variables, the connections, the ``ledgergc_settings``
variable (JSON), then the run's params that are settings (``RUN_SETTINGS``; the other
params, dry_run, force, namespace, ..., steer the run and are read by the task). The
variable and the params name settings by key and give values as JSON does; both go
through the settings' own declarations (``Settings.with_values``), like the environment.

Nothing here writes the worker's environment: credentials go into the Settings, and a
Spark task hands them to its application through spark-submit's environment
(``orphan_tasks``).

Connections (all optional; see ``airflow_settings.yaml``):
* ``ledgergc_zookeeper``: host ``h1:2181,h2:2181`` (or host + port) or any form
  ``LEDGERGC_ZK_HOSTS`` takes (``zk:…``, ``metadata-store:zk:…``, ``zk+hierarchical://…``),
  ``extra.chroot``, ``extra.bk_zk_hosts`` and ``extra.bk_ledgers_root``, login/password
  for ZooKeeper digest auth, or, with ``extra.zk_sasl_mechanism``, the SASL login; TLS
  and SASL by the settings' keys in the extra (``zk_tls``, ``zk_tls_ca``, ``zk_jaas``,
  ``bk_zk_*``); Pulsar's configuration store by ``extra.config_store_hosts`` and
  ``config_store_*``;
* ``ledgergc_s3``: type ``aws``; ``extra.endpoint_url`` (empty: AWS), ``extra.region_name``,
  ``extra.bucket`` and ``extra.prefix``; its identity as the Amazon provider's
  ``AwsBaseHook`` reads it: keys, a role to assume, web identity (IRSA), a profile, or
  none (boto3's default chain) (``aws_credentials``);
* ``google_cloud_default``: the Google provider's ``GCSHook`` connection, read when tiered
  storage is on GCS (``LEDGERGC_OFFLOAD_DRIVER=google-cloud-storage``): an access token
  is minted from its identity for the task (``gcp_credentials``);
* ``wasb_default``: the Microsoft Azure provider's ``WasbHook`` connection, read when
  tiered storage is on Azure (``azureblob``): a SAS for the container, or the account
  key, SAS or connection string it holds (``azure_credentials``).

A Spark task's application gets its credentials through ``spark_settings``: temporary
ones, or none (the executors' own chain); long-lived AWS keys never reach a cluster, nor
do a GCS key (an access token does) or an Azure account key (a SAS does).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import BaseHook

from ledger_gc.config.settings import Settings
from ledger_gc.config.zk_addresses import is_bookkeeper_url
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage.offload_drivers import AZURE, GCS, family

ZK_CONN_ID = "ledgergc_zookeeper"
S3_CONN_ID = "ledgergc_s3"
GCS_CONN_ID = "google_cloud_default"
WASB_CONN_ID = "wasb_default"
SETTINGS_VARIABLE = "ledgergc_settings"

#: The DAG params (of either DAG) that are settings.
RUN_SETTINGS = (
    "grace_seconds",
    "retention_seconds",
    "trim_retention_seconds",
    "trim_retention_bytes",
    "trim_retention_overrides",
)


def _connection(conn_id: str) -> Any | None:
    try:
        return BaseHook.get_connection(conn_id)
    except Exception:  # not defined: the environment variables stand
        return None


def _variable() -> dict[str, Any]:
    from airflow.sdk import Variable

    try:
        raw = Variable.get(SETTINGS_VARIABLE, default=None)
    except Exception:
        return {}
    if not raw:
        return {}
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def zookeeper_overrides(conn: Any) -> dict[str, Any]:
    """``ledgergc_zookeeper`` -> settings: the host in any form ``LEDGERGC_ZK_HOSTS``
    takes (``h1:2181,h2:2181``, ``zk:…``, ``metadata-store:zk:…``, ``zk+hierarchical://…``),
    ``extra.chroot`` appended to a host list that has none, ``extra.bk_zk_hosts`` and
    ``extra.bk_ledgers_root`` for BookKeeper's ensemble, login/password for digest auth.
    The settings check every form (one line naming the connection on a bad one)."""
    extra = conn.extra_dejson or {}
    host = (conn.host or "").strip()
    if conn.port and "," not in host and ":" not in host:
        host = f"{host}:{conn.port}"
    chroot = str(extra.get("chroot", "")).strip("/")
    changes: dict[str, Any] = {}
    if host:
        if chroot and is_bookkeeper_url(host):
            # Appended, the chroot would become the URL's path: BookKeeper's ledgers
            # root, with Pulsar's metadata left at the ensemble's root.
            raise ConfigError(
                f"Airflow connection {ZK_CONN_ID}: host {host!r} is BookKeeper's URL, whose "
                f"path is the ledgers root, not a chroot, and extra.chroot is {chroot!r}; "
                "drop extra.chroot, or give the host as a host list (zk1:2181,zk2:2181) "
                "with it"
            )
        if chroot and ("/" in host.split("://")[-1]):
            raise ConfigError(
                f"Airflow connection {ZK_CONN_ID}: host {host!r} has a path and extra.chroot "
                f"is {chroot!r}; give the chroot once"
            )
        changes["zk_address"] = host + (f"/{chroot}" if chroot else "")
    for key, field in (("bk_zk_hosts", "bk_zk_address"), ("bk_ledgers_root", "bk_ledgers_root")):
        if extra.get(key):
            changes[field] = str(extra[key])
    if conn.login and not extra.get("zk_sasl_mechanism"):
        changes["zk_digest"] = f"{conn.login}:{conn.password or ''}"
    return changes


def zookeeper_security(conn: Any) -> dict[str, Any]:
    """``ledgergc_zookeeper``'s TLS and SASL, by the settings' own keys in its extra
    (``zk_tls``, ``zk_tls_ca``, ``zk_sasl_mechanism``, ``zk_jaas``, ``bk_zk_*``, the
    configuration store's ``config_store_hosts`` and ``config_store_*``...); with
    ``zk_sasl_mechanism`` its login and password are the SASL login (else digest auth,
    ``zookeeper_overrides``). Applied as ``with_values`` (an unknown key: one line)."""
    extra = conn.extra_dejson or {}
    values = {
        key: value
        for key, value in extra.items()
        if key.startswith(("zk_", "bk_zk_", "config_store_")) and key != "bk_zk_hosts"
    }
    if extra.get("zk_sasl_mechanism") and conn.login:
        values.setdefault("zk_sasl_username", conn.login)
        values.setdefault("zk_sasl_password", conn.password or "")
    return values


def s3_overrides(conn: Any) -> dict[str, Any]:
    """``ledgergc_s3`` -> where the store is: ``extra.endpoint_url`` (empty: AWS),
    ``extra.region_name``, ``extra.bucket``, ``extra.prefix``. Its credentials are the
    Amazon provider's to resolve (``aws_credentials.connection_credentials``)."""
    extra = conn.extra_dejson or {}
    changes: dict[str, Any] = {}
    if "endpoint_url" in extra:
        changes["s3_endpoint"] = extra["endpoint_url"] or None
    for key, field in (("region_name", "s3_region"), ("bucket", "bucket"), ("prefix", "prefix")):
        if key in extra:
            changes[field] = extra[key]
    return changes


def _from_connection(settings: Settings, conn_id: str, changes: dict[str, Any]) -> Settings:
    """``changes`` made by connection ``conn_id``; a bad value is one line naming it."""
    try:
        return settings.overridden_by("connection", conn_id, changes)
    except ConfigError as exc:
        raise ConfigError(f"Airflow connection {conn_id}: {exc}") from exc


def apply_mapping(
    settings: Settings, values: Mapping[str, Any], source: str = SETTINGS_VARIABLE
) -> Settings:
    """Apply ``{"grace_seconds": 60, "delete_enabled": true, ...}`` to settings.

    Keys and conversions are the settings' own declarations (``Settings.with_values``):
    a quoted number or flag is read as the environment's would be, and checked."""
    return settings.with_values(values, source=source)


def assemble_settings(
    connection: Callable[[str], Any | None],
    variable: Callable[[], Mapping[str, Any]],
    params: Mapping[str, Any] | None = None,
    *,
    zookeeper_conn_id: str = ZK_CONN_ID,
    s3_conn_id: str = S3_CONN_ID,
    s3_credentials: bool = True,
    gcs_conn_id: str = GCS_CONN_ID,
    wasb_conn_id: str = WASB_CONN_ID,
) -> Settings:
    """The effective settings, whoever reads Airflow's connections and variable: the
    environment, the connections, the variable, then ``params`` (every key of which must
    be a setting), and last a broker.conf for whatever is still unset.

    ``connection(conn_id)`` (None: not defined) and ``variable()`` read them: the Task SDK
    in a task (``LedgerGcHook``), the core models in the API server (the plugin's page),
    so that the page sees what the tasks see. ``s3_credentials``: resolve the S3
    connection's identity (a role is assumed then), and tiered storage's on GCS or
    Azure (a token or SAS is minted then: ``offload_credentials``); the page, which
    reads no bucket, does without."""
    settings = Settings.from_env()
    zk = connection(zookeeper_conn_id)
    if zk is not None:
        settings = _from_connection(settings, zookeeper_conn_id, zookeeper_overrides(zk))
        settings = settings.with_values(
            zookeeper_security(zk),
            source=f"Airflow connection {zookeeper_conn_id}",
            kind="connection",
        )
    s3 = connection(s3_conn_id)
    if s3 is not None:
        changes = s3_overrides(s3)
        if s3_credentials:
            from ledger_gc.airflow.aws_credentials import connection_credentials

            changes.update(connection_credentials(s3))
        settings = _from_connection(settings, s3_conn_id, changes)
    settings = apply_mapping(settings, variable())
    settings = settings.with_values(params or {}, source="the run's params", kind="params")
    # A broker.conf named by the variable (pulsar_conf) fills what is still unset.
    settings = settings.with_broker_conf()
    if s3_credentials:
        settings = offload_credentials(settings, connection, gcs_conn_id, wasb_conn_id)
    return settings


def offload_credentials(
    settings: Settings,
    connection: Callable[[str], Any | None],
    gcs_conn_id: str = GCS_CONN_ID,
    wasb_conn_id: str = WASB_CONN_ID,
) -> Settings:
    """Tiered storage's credentials when it is on GCS or Azure (the driver known once a
    broker.conf has been read): the provider's connection, read only then."""
    store = family(settings.offload_driver)
    if not settings.offload_bucket or store not in (GCS, AZURE):
        return settings
    if store == GCS:
        from ledger_gc.airflow.gcp_credentials import with_gcs_token

        return with_gcs_token(settings, connection(gcs_conn_id))
    from ledger_gc.airflow.azure_credentials import with_azure_credentials

    return with_azure_credentials(settings, connection(wasb_conn_id))


class LedgerGcHook(BaseHook):
    """The settings of ledger-gc's tasks, from Airflow's connections, variable and params.

    :param zookeeper_conn_id: the ZooKeeper connection (hosts, chroot, digest auth);
        not defined: ``LEDGERGC_ZK_HOSTS`` and ``LEDGERGC_ZK_DIGEST`` stand.
    :param s3_conn_id: the S3 connection (endpoint, region, bucket, prefix, key pair);
        not defined: the ``LEDGERGC_*`` S3 settings and boto3's default chain stand.
    :param gcs_conn_id: the Google connection (``GCSHook``), read when tiered storage is
        on GCS; not defined: the brokers' key file, or each process's own credentials.
    :param wasb_conn_id: the Azure connection (``WasbHook``), read when tiered storage is
        on Azure; not defined: ``AZURE_STORAGE_*`` as the brokers have them.
    """

    conn_name_attr = "zookeeper_conn_id"
    default_conn_name = ZK_CONN_ID
    hook_name = "ledger-gc"

    def __init__(
        self,
        zookeeper_conn_id: str = ZK_CONN_ID,
        s3_conn_id: str = S3_CONN_ID,
        gcs_conn_id: str = GCS_CONN_ID,
        wasb_conn_id: str = WASB_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zookeeper_conn_id = zookeeper_conn_id
        self.s3_conn_id = s3_conn_id
        self.gcs_conn_id = gcs_conn_id
        self.wasb_conn_id = wasb_conn_id

    def get_conn(self) -> Settings:
        """The settings of a run without params (what every run starts from)."""
        return self.get_settings()

    def get_settings(self, params: Mapping[str, Any] | None = None) -> Settings:
        """The effective settings (``assemble_settings``) through the Task SDK: env,
        connections, the variable, then ``params`` (``settings_for`` picks them from a
        run's)."""
        return masked(
            assemble_settings(
                _connection,
                _variable,
                params,
                zookeeper_conn_id=self.zookeeper_conn_id,
                s3_conn_id=self.s3_conn_id,
                gcs_conn_id=self.gcs_conn_id,
                wasb_conn_id=self.wasb_conn_id,
            )
        )


def spark_settings(settings: Settings, *, local_master: bool) -> Settings:
    """What a Spark application of a task is handed: never long-lived AWS keys on a
    cluster (``aws_credentials.for_spark``), nor an Azure account key
    (``azure_credentials.for_spark``: a SAS instead); GCS gets its access token only.
    Both exchanges are the library's (``config.spark_credentials``), which the
    ``ledgergc`` command calls the same way when its master is not local."""
    from ledger_gc.airflow import azure_credentials
    from ledger_gc.airflow.aws_credentials import for_spark

    settings = for_spark(settings, _connection(S3_CONN_ID), local_master=local_master)
    return masked(azure_credentials.for_spark(settings, local_master=local_master))


def masked(settings: Settings) -> Settings:
    """``settings``, their secrets (declared and derived: ``config.secret_values``) masked
    from now on in every log record of this process (``secret_masking``) and by Airflow's
    own masker (the task log, the Rendered view, the supervisor's log)."""
    from airflow.sdk.log import mask_secret

    from ledger_gc.config.secret_masking import install_secret_masking
    from ledger_gc.config.secret_values import secret_values

    secrets = secret_values(settings)
    install_secret_masking(secrets)
    for secret in secrets:
        mask_secret(secret)
    return settings


def settings_for(params: Mapping[str, Any] | None) -> Settings:
    """The settings of a task of either DAG (``LedgerGcHook``): env, connections, the
    variable, then the run's params that are settings (``RUN_SETTINGS``)."""
    params = params or {}
    return LedgerGcHook().get_settings({key: params.get(key) for key in RUN_SETTINGS})


def dag_schedule(variable: str, default: str) -> str | None:
    """A DAG's schedule from ``variable`` (a cron expression or preset; ``none``,
    ``manual`` or empty: manual runs only). Read when the DAG file is parsed: an
    environment variable, no I/O."""
    import os

    value = os.environ.get(variable, default).strip()
    return None if value.lower() in ("", "none", "manual") else value
