"""S3 credentials of ledger-gc's tasks, through the Amazon provider's ``AwsBaseHook``.

The ``ledgergc_s3`` connection (type ``aws``) is read the way every Amazon operator reads
its connection, so each identity the provider knows works here too:

* keys: login/password (and ``extra.aws_session_token`` for temporary ones);
* a role to assume: ``extra.role_arn`` (``assume_role_kwargs``, ``DurationSeconds`` ...),
  from the keys, a profile or the worker's own identity;
* web identity, as IRSA gives a pod on Kubernetes: ``role_arn`` with
  ``assume_role_method: assume_role_with_web_identity`` and
  ``assume_role_with_web_identity_federation: file`` (the token file from
  ``extra.assume_role_with_web_identity_token_file`` or ``AWS_WEB_IDENTITY_TOKEN_FILE``);
  or no identity in the connection at all, and boto3 reads IRSA's ``AWS_ROLE_ARN`` and
  ``AWS_WEB_IDENTITY_TOKEN_FILE`` itself;
* a profile (``extra.profile_name``);
* none of these: boto3's default chain (environment, profile, web identity, instance
  profile), resolved wherever a client is made, by each process for itself.

The STS endpoint of a role is ``extra.service_config.sts.endpoint_url`` (the provider
never sends an assume-role to the S3 ``endpoint_url``).

And what a Spark application gets (``for_spark``): the driver's and executors' clients
are built from the settings that the task hands them (spark-submit's environment, the
tasks' closures). Temporary credentials (a role, web identity, a session token) are
handed over as they are. No credentials: none, and each executor uses its own default
chain (an instance profile, IRSA). Long-lived AWS keys never leave this worker for a
cluster: they are exchanged for temporary ones first (STS ``GetSessionToken``), and a
worker that cannot exchange them refuses in one line. That holds for every store on AWS,
also one named by its endpoint (regional, FIPS, dual-stack, a VPC endpoint: any host of
an AWS partition's domains, as botocore lists them). With a local master the executors
are this worker's own processes; and an S3-compatible store that is not AWS and has no
STS (SeaweedFS, MinIO, Ceph at a custom endpoint) has only its static keys: those are
handed over as they are. (A task never hands secrets to a master that would show them
on spark-submit's command line: ``orphan_tasks.check_spark_master``.)
"""

from __future__ import annotations

import functools
import logging
from typing import Any
from urllib.parse import urlsplit

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage.offload_drivers import S3, family

log = logging.getLogger(__name__)

#: How long the temporary credentials that replace long-lived keys last (STS allows
#: 900 s to 36 h for an IAM user); ``extra.session_duration_seconds`` overrides it.
SESSION_SECONDS = 12 * 3600


class ConnectionAwsHook(AwsBaseHook):
    """``AwsBaseHook`` over a connection already read (the one ``LedgerGcHook`` looked
    up once for its bucket and endpoint): the provider's own session, role assumption and
    web identity, without a second lookup."""

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        self.connection = connection
        super().__init__(aws_conn_id=connection.conn_id, client_type="s3", **kwargs)

    def get_connection(self, conn_id: str) -> Any:  # type: ignore[override]
        return self.connection


def connection_credentials(connection: Any) -> dict[str, Any]:
    """The settings' credentials from the connection (``s3_access_key_id``, ...), as the
    provider resolves them: a role assumed now (temporary credentials), the keys, a
    profile's. Empty when the connection names no identity (keys, a role, a profile):
    then boto3's default chain stands, in every process for itself. A failure (STS
    refused the role, no source credentials) is one line naming the connection."""
    hook = ConnectionAwsHook(connection)
    config = hook.conn_config
    if not (config.aws_access_key_id or config.role_arn or config.profile_name):
        return {}
    try:
        credentials = hook.get_credentials()
    except Exception as exc:  # botocore's and the provider's errors alike
        what = f"assuming role {config.role_arn}" if config.role_arn else "reading its credentials"
        raise ConfigError(
            f"Airflow connection {connection.conn_id}: {what} failed ({_reason(exc)}); check "
            "its keys, role_arn and service_config.sts.endpoint_url"
        ) from exc
    return {
        "s3_access_key_id": credentials.access_key,
        "s3_secret_access_key": credentials.secret_key,
        "s3_session_token": credentials.token or None,
    }


def for_spark(settings: Settings, connection: Any | None, *, local_master: bool) -> Settings:
    """The settings a Spark application is handed: temporary credentials, none (the
    executors' own chain), or, for a store that is not AWS and has no STS, its static
    keys (see the module's docstring)."""
    if not settings.s3_access_key_id or local_master:
        return settings
    if not _endpoints(settings):
        # No store of this application is S3 (the block store off, tiered storage on GCS
        # or Azure): its AWS keys are nobody's business there, long-lived or not.
        log.info("no store is S3: the AWS keys are not handed to the Spark application")
        return settings.without_values(
            "s3_access_key_id", "s3_secret_access_key", "s3_session_token"
        )
    if settings.s3_session_token:
        return settings
    config = ConnectionAwsHook(connection).conn_config if connection is not None else None
    # The connection's own STS (never its S3 endpoint_url), as the provider resolves it.
    sts_endpoint = (
        config.get_service_endpoint_url("sts", sts_connection_assume=True) if config else None
    )
    if sts_endpoint is None and not any(map(is_aws_endpoint, _endpoints(settings))):
        log.info(
            "S3 at %s is not AWS and has no STS: its static keys go to the Spark "
            "application as they are",
            ", ".join(sorted(endpoint for endpoint in _endpoints(settings) if endpoint)),
        )
        return settings
    extra = (connection.extra_dejson or {}) if connection is not None else {}
    seconds = int(extra.get("session_duration_seconds", SESSION_SECONDS))
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=settings.s3_secret_access_key,
        region_name=settings.s3_region,
    )
    where = sts_endpoint or f"AWS STS ({settings.s3_region})"
    try:
        answer = session.client("sts", endpoint_url=sts_endpoint).get_session_token(
            DurationSeconds=seconds
        )
    except Exception as exc:  # botocore's errors: refused, unreachable
        raise ConfigError(
            f"long-lived AWS keys are never handed to Spark executors, and exchanging them "
            f"for temporary ones at {where} failed ({_reason(exc)}); give the ledgergc_s3 "
            "connection a role_arn to assume, or no keys (the executors' own instance "
            "profile or IRSA)"
        ) from exc
    temporary = answer["Credentials"]
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


def _endpoints(settings: Settings) -> set[str | None]:
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


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
