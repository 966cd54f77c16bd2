"""What a Spark application on a cluster is handed: short-lived credentials only.

A Spark job's executors get the object stores' credentials inside the tasks' pickled
closures (the endpoints the edge resolves), in processes on other hosts. So whoever
starts an application on a master that is not local, the ``ledgergc`` command
(``commands/orphans``) or an Airflow task (``airflow/settings_hook.spark_settings``),
hands it the settings this module returns, never long-lived secrets:

* long-lived AWS keys (no session token) are exchanged for an STS session
  (``GetSessionToken``) at the STS the caller names (an Airflow connection's
  ``service_config.sts.endpoint_url``; for the CLI boto3's own ``AWS_ENDPOINT_URL_STS``)
  or AWS's own. A store of AWS (no endpoint, or a host of AWS's partitions' domains) has
  that STS; an S3-compatible store that is not AWS and for which no STS is named
  (SeaweedFS, MinIO, Ceph) has only its static keys, which are handed over as they are
  (logged). A refused or unreachable exchange is one line, before Spark starts. AWS keys
  that no store of the application uses are left out.
* an Azure account key (given, or in a connection string) is exchanged for a SAS of
  the offload container signed with it here (list, read, delete), beside the account's
  soft delete retention read with the key (a container SAS cannot read it); the key and
  the connection string are left out.
* GCS's key file never gets this far: the edge exchanges it for an access token
  (``gcs_key_file``), which is all an ``ObjectStore`` carries.

With a local master the executors are this process's own children: nothing changes.
Whatever is minted here is masked in this process's logs at once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from ledger_gc.config.edge import offload_store
from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.config.secret_masking import install_secret_masking
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage.offload_drivers import AZURE, S3, family

log = logging.getLogger(__name__)

#: How long the temporary credentials that replace long-lived AWS keys last (STS allows
#: 900 s to 36 h for an IAM user).
SESSION_SECONDS = 12 * 3600
#: How long a SAS minted for an application lasts (a cycle's survey and delete fit in it).
SAS_SECONDS = 12 * 3600
#: A SAS starts a little in the past: the storage service's clock may be behind ours.
CLOCK_SKEW = timedelta(minutes=5)

#: What to do when long-lived AWS keys cannot be exchanged, where they are settings.
AWS_KEYS_FIX = (
    "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL_STS, the STS "
    "they are exchanged at), give temporary credentials (AWS_SESSION_TOKEN) or none (the "
    "executors' own instance profile or IRSA), or run Spark on a local master"
)


def is_local_master(master: str) -> bool:
    """Whether a Spark master runs the executors in this process's machine as its own
    children (``local``, ``local[4]``, ``local-cluster[...]``), as the Airflow path
    decides it: nothing that it is handed leaves this machine."""
    return master.strip().lower().startswith("local")


def for_spark(
    settings: Settings,
    *,
    local_master: bool,
    soft_delete_days: Callable[[ObjectStore], int | None],
    sts_endpoint: str | None = None,
    session_seconds: int = SESSION_SECONDS,
    aws_fix: str = AWS_KEYS_FIX,
) -> Settings:
    """The settings a Spark application is handed (see the module's docstring):
    ``aws_for_spark`` then ``azure_for_spark``."""
    settings = aws_for_spark(
        settings,
        local_master=local_master,
        sts_endpoint=sts_endpoint,
        session_seconds=session_seconds,
        fix=aws_fix,
    )
    return azure_for_spark(settings, local_master=local_master, soft_delete_days=soft_delete_days)


def aws_for_spark(
    settings: Settings,
    *,
    local_master: bool,
    sts_endpoint: str | None = None,
    session_seconds: int = SESSION_SECONDS,
    fix: str = AWS_KEYS_FIX,
) -> Settings:
    """Temporary credentials, none (no store is S3), or, for a store that is not AWS and
    names no STS, its static keys. ``sts_endpoint``: the STS to exchange at (None: the
    region's, or what boto3 is configured with); ``fix``: the error's advice, naming
    where the keys came from."""
    if not settings.s3_access_key_id or local_master:
        return settings
    endpoints = s3_endpoints(settings)
    if not endpoints:
        # No store of this application is S3 (the block store off, tiered storage on GCS
        # or Azure): its AWS keys are nobody's business there, long-lived or not.
        log.info("no store is S3: the AWS keys are not handed to the Spark application")
        return settings.without_values(
            "s3_access_key_id", "s3_secret_access_key", "s3_session_token"
        )
    if settings.s3_session_token:
        return settings
    if sts_endpoint is None and not any(map(is_aws_endpoint, endpoints)):
        log.info(
            "S3 at %s is not AWS and has no STS: its static keys go to the Spark "
            "application as they are",
            ", ".join(sorted(endpoint for endpoint in endpoints if endpoint)),
        )
        return settings
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=settings.s3_secret_access_key,
        region_name=settings.s3_region,
    )
    where = sts_endpoint or f"AWS STS ({settings.s3_region})"
    try:
        answer = session.client("sts", endpoint_url=sts_endpoint).get_session_token(
            DurationSeconds=session_seconds
        )
    except Exception as exc:  # botocore's errors: refused, unreachable
        raise ConfigError(
            f"long-lived AWS keys are never handed to Spark executors, and exchanging them "
            f"for temporary ones at {where} failed ({reason(exc)}); {fix}"
        ) from exc
    temporary = answer["Credentials"]
    install_secret_masking([temporary["SecretAccessKey"], temporary["SessionToken"]])
    log.info(
        "long-lived AWS keys exchanged for temporary credentials (%s, until %s) for Spark",
        where,
        temporary["Expiration"],
    )
    return settings.overridden_by(
        "sts",
        f"GetSessionToken at {where}",
        {
            "s3_access_key_id": temporary["AccessKeyId"],
            "s3_secret_access_key": temporary["SecretAccessKey"],
            "s3_session_token": temporary["SessionToken"],
        },
    )


def azure_for_spark(
    settings: Settings,
    *,
    local_master: bool,
    soft_delete_days: Callable[[ObjectStore], int | None],
) -> Settings:
    """On a cluster, a SAS for the offload container in place of the account key (and
    of a connection string that holds one); one line naming the setting when no SAS can
    be signed.

    Scoped to what a cycle does there (list, read, delete, and a version's delete): not
    an account SAS, which would let whoever holds a task's closure for its 12 hours
    delete any container of the account or turn off the soft delete a restore relies on.
    Such a SAS cannot read the account's soft delete setting, so ``soft_delete_days``
    (``storage.offload_buckets.account_soft_delete_days``, a layer above this one)
    reads it with the key and it is handed on beside the SAS
    (``azure_soft_delete_days``)."""
    if local_master or family(settings.offload_driver) != AZURE or not settings.offload_bucket:
        return settings
    account, key, endpoint = account_key(settings)
    if not key:
        return settings
    if not account:
        raise ConfigError(
            "an Azure account key is never handed to Spark executors, and no account names "
            "it for a SAS; set AZURE_STORAGE_ACCOUNT (or the wasb connection's login)"
        )
    try:
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    except ImportError as exc:
        raise ConfigError(
            "an Azure account key is exchanged for a SAS before Spark executors get it, and "
            "azure-storage-blob is not installed; install it (requirements.txt)"
        ) from exc
    start, expiry = sas_window()
    try:
        sas = generate_container_sas(
            account,
            settings.offload_bucket,
            account_key=key,
            permission=ContainerSasPermissions(
                read=True, delete=True, list=True, delete_previous_version=True
            ),
            expiry=expiry,
            start=start,
        )
    except Exception as exc:  # binascii.Error: a key that is not base64
        where = (
            "AZURE_STORAGE_ACCESS_KEY"
            if settings.azure_storage_key
            else "AZURE_STORAGE_CONNECTION_STRING's AccountKey"
        )
        raise ConfigError(
            f"an Azure account key is exchanged for a SAS before Spark executors get it, "
            f"and {where} cannot sign one ({type(exc).__name__}: not an account key); give "
            "the account's key as the portal shows it (base64), or a SAS "
            "(LEDGERGC_OFFLOAD_AZURE_SAS)"
        ) from exc
    install_secret_masking([sas])
    days = soft_delete_days(offload_store(settings))  # with the key, before it goes
    soft_days = -1 if days is None else days  # (unreadable: "unknown" in the report)
    log.info(
        "Azure account key exchanged for a SAS of container %s (until %s) for Spark",
        settings.offload_bucket,
        expiry,
    )
    return settings.overridden_by(
        "sas",
        "container SAS signed with the account key",
        {
            "azure_storage_sas": sas,
            "azure_storage_account": account,
            "offload_endpoint": settings.offload_endpoint or endpoint,
            "azure_soft_delete_days": soft_days,
        },
    ).without_values("azure_storage_key", "azure_storage_connection_string")


def s3_endpoints(settings: Settings) -> set[str | None]:
    """Every S3 endpoint the application uses the keys with (None: AWS's own): the
    block store's when it is on, and the offload bucket's when tiered storage is on and
    on S3; empty when no store is S3."""
    endpoints: set[str | None] = {settings.s3_endpoint} if settings.bucket else set()
    if settings.offload_bucket and family(settings.offload_driver) == S3:
        endpoints.add(settings.offload_endpoint or settings.s3_endpoint)
    return endpoints


def is_aws_endpoint(endpoint: str | None) -> bool:
    """Whether an S3 endpoint is AWS's own: none (boto3's default), or a host in one of
    the domains of AWS's partitions as botocore knows them (``amazonaws.com`` with its
    FIPS, dual-stack and VPC endpoint hosts, ``api.aws``, ``amazonaws.com.cn``, the
    isolated partitions'). Such a store has AWS's STS, whatever its endpoint says."""
    if not endpoint:
        return True
    host = (urlsplit(endpoint).hostname or "").lower().rstrip(".")
    return any(host == domain or host.endswith("." + domain) for domain in _aws_domains())


@functools.cache
def _aws_domains() -> frozenset[str]:
    from botocore.loaders import create_loader

    partitions = create_loader().load_data("partitions")["partitions"]
    return frozenset(
        domain
        for partition in partitions
        for key in ("dnsSuffix", "dualStackDnsSuffix")
        if (domain := partition["outputs"].get(key))
    )


def account_key(settings: Settings) -> tuple[str | None, str | None, str | None]:
    """The account, its key and blob endpoint: the settings', else a connection string's."""
    parts: dict[str, str] = {}
    for part in (settings.azure_storage_connection_string or "").split(";"):
        name, _, value = part.partition("=")
        if name.strip():
            parts[name.strip().lower()] = value.strip()
    account = settings.azure_storage_account or parts.get("accountname")
    key = settings.azure_storage_key or parts.get("accountkey")
    endpoint = parts.get("blobendpoint")
    suffix = parts.get("endpointsuffix")
    if not endpoint and suffix and account:
        # A sovereign cloud's (Azure China, US Government) string names its cloud so.
        scheme = parts.get("defaultendpointsprotocol") or "https"
        endpoint = f"{scheme}://{account}.blob.{suffix}"
    return account, key, endpoint


def sas_window() -> tuple[datetime, datetime]:
    """A SAS's start (a little in the past) and expiry."""
    now = datetime.now(UTC)
    return now - CLOCK_SKEW, now + timedelta(seconds=SAS_SECONDS)


def reason(exc: Exception) -> str:
    """An exception as a short clause: its type and first line (no traceback)."""
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
