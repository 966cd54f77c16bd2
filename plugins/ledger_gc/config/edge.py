"""The edge: ``Settings`` resolved into ``Endpoints``, once per command or task.

A CLI command (``ledger_gc/commands``) and an Airflow task (``ledger_gc/airflow``) call
``resolve``; what they call below receives the endpoints (``config/endpoints.py``), never
the settings. This is the one module that reads the settings for them: which ensemble
BookKeeper's metadata is on, with which TLS and SASL parts (``LEDGERGC_BK_ZK_*``, each
unset part Pulsar's), where Pulsar's configuration store is (``LEDGERGC_CONFIG_STORE_*``,
likewise), which variable each error names.
"""

from __future__ import annotations

from ledger_gc.config import gcs_key_file
from ledger_gc.config.endpoints import (
    BOOKKEEPER,
    CONFIGURATION,
    BookKeeperEndpoint,
    Endpoints,
    ObjectStore,
    StateEndpoint,
    ZkEndpoint,
)
from ledger_gc.config.policy import Policy
from ledger_gc.config.settings import Settings
from ledger_gc.config.zk_addresses import ZkAddress
from ledger_gc.config.zk_security import BOOKKEEPER_PREFIX, Names, ZkSecurity, names_for
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage import offload_drivers


def resolve(settings: Settings) -> Endpoints:
    """The endpoints of ``settings``: called by a CLI command and an Airflow task, once."""
    return Endpoints(
        zk_endpoint(settings),
        bookkeeper_endpoint(settings),
        block_store(settings),
        offload_store(settings),
        StateEndpoint(settings.state_dir, settings.state_url),
        policy(settings),
        settings.bookkeeper,
        config_store_endpoint(settings),
        settings.pulsar_metadata,
        settings.configuration_given,
    )


def policy(settings: Settings) -> Policy:
    """What the engines decide by (``config/policy.py``), from ``settings``."""
    return Policy(
        delete_enabled=settings.delete_enabled,
        grace_seconds=settings.grace_seconds,
        retention_seconds=settings.retention_seconds,
        orphan_max_fraction=settings.orphan_max_fraction,
        orphan_lock_wait_seconds=settings.orphan_lock_wait_seconds,
        orphan_delete_spark_over=settings.orphan_delete_spark_over,
        bk_shared=settings.bk_shared,
        bk_remove_unreadable=settings.bk_remove_unreadable,
        bk_record_cache=settings.bk_record_cache,
        bk_full_read_every=settings.bk_full_read_every,
        bk_record_cache_keep_days=settings.bk_record_cache_keep_days,
        pulsar_clusters=settings.pulsar_clusters,
        metadata_read_only=settings.metadata_read_only,
        trim_retention=settings.trim_retention,
        trim_retention_overrides=dict(settings.trim_retention_overrides),
    )


def block_store(settings: Settings) -> ObjectStore:
    """The bucket of ledger blocks (``LEDGERGC_BUCKET``, ``_PREFIX``, ``_S3_*``)."""
    return ObjectStore(
        settings.bucket,
        settings.prefix,
        settings.s3_endpoint,
        settings.s3_region,
        settings.s3_access_key_id,
        settings.s3_secret_access_key,
        settings.s3_session_token,
    )


def offload_store(settings: Settings) -> ObjectStore:
    """Pulsar's tiered-storage bucket (``LEDGERGC_OFFLOAD_*``) in the store its driver
    names (``LEDGERGC_OFFLOAD_DRIVER``), with that store's credentials and nothing else's:

    * S3's API: its endpoint and region, unset, the block store's; the same keys;
    * GCS: ``LEDGERGC_OFFLOAD_ENDPOINT`` (unset: Google's), an access token (given, or
      exchanged here, once, for ``LEDGERGC_OFFLOAD_GCS_KEY_FILE``'s key: the key file
      itself goes no further), the project;
    * Azure: the endpoint (unset: the account's), the account and its key, a SAS or a
      connection string, as the settings hold them.

    Tiered storage off (no bucket): the driver's family only, no credential read."""
    driver = offload_drivers.family(settings.offload_driver) or offload_drivers.S3
    common = (settings.offload_bucket, settings.offload_prefix)
    problem = offload_drivers.bucket_name_problem(driver, settings.offload_bucket)
    if problem:
        raise ConfigError(
            f"LEDGERGC_OFFLOAD_BUCKET={settings.offload_bucket!r} {problem}; "
            f"LEDGERGC_OFFLOAD_DRIVER={settings.offload_driver} names that store: set the "
            "bucket its brokers offload to, or the driver they use"
        )
    if driver == offload_drivers.GCS:
        token, project = settings.offload_gcs_token, settings.offload_gcs_project
        if not token and settings.offload_gcs_key_file and settings.offload_bucket:
            token, key_project = gcs_key_file.access_token(settings.offload_gcs_key_file)
            project = project or key_project
        return ObjectStore(
            *common,
            settings.offload_endpoint,
            driver=driver,
            gcs_token=token,
            gcs_project=project,
        )
    if driver == offload_drivers.AZURE:
        return ObjectStore(
            *common,
            settings.offload_endpoint,
            driver=driver,
            azure_account=settings.azure_storage_account,
            azure_key=settings.azure_storage_key,
            azure_sas=settings.azure_storage_sas,
            azure_connection_string=settings.azure_storage_connection_string,
            azure_soft_delete_days=(
                settings.azure_soft_delete_days if settings.azure_soft_delete_days >= 0 else None
            ),
        )
    return ObjectStore(
        *common,
        settings.offload_endpoint or settings.s3_endpoint,
        settings.offload_s3_region or settings.s3_region,
        settings.s3_access_key_id,
        settings.s3_secret_access_key,
        settings.s3_session_token,
        driver=driver,
    )


def zk_endpoint(settings: Settings) -> ZkEndpoint:
    """Pulsar's local metadata store as ledger-gc opens sessions to it."""
    return _endpoint(
        settings,
        settings.zk_address,
        settings.zk_security,
        settings.ensemble,
        settings.zk_setting_names(),
        "LEDGERGC_ZK_HOSTS",
    )


def bookkeeper_endpoint(settings: Settings) -> BookKeeperEndpoint:
    """BookKeeper's metadata (``LEDGERGC_BK_ZK_*``, each unset part Pulsar's)."""
    zk = _endpoint(
        settings,
        settings.bookkeeper_address,
        settings.bookkeeper_security,
        BOOKKEEPER,
        # Its own LEDGERGC_BK_ZK_* where set, else the Pulsar variable it falls back to.
        names_for(BOOKKEEPER_PREFIX, settings.bk_zk_security, settings.bookkeeper_env),
        settings.bookkeeper_env,
    )
    env = settings.bookkeeper_env
    return BookKeeperEndpoint(
        zk,
        settings.bookkeeper_root,
        settings.bookkeeper_manager,
        f"{env}={settings.given(env)!r}",
    )


def config_store_endpoint(settings: Settings) -> ZkEndpoint | None:
    """Pulsar's configuration store (``LEDGERGC_CONFIG_STORE_*``, each unset part the
    local store's); None when that is the very endpoint of the local store."""
    endpoint = _endpoint(
        settings,
        settings.configuration_address,
        settings.configuration_security,
        CONFIGURATION,
        settings.configuration_names(),
        settings.configuration_env,
        digest=settings.configuration_digest,
    )
    return None if endpoint == zk_endpoint(settings) else endpoint


def _endpoint(
    settings: Settings,
    address: ZkAddress,
    security: ZkSecurity,
    ensemble: str,
    names: Names,
    hosts_variable: str,
    *,
    digest: str | None = None,
) -> ZkEndpoint:
    return ZkEndpoint(
        address,
        security,
        digest if digest is not None else settings.zk_digest,
        settings.zk_timeout_seconds,
        settings.zk_max_reads_per_second,
        settings.zk_max_record_bytes,
        ensemble,
        names,
        hosts_variable,
    )
