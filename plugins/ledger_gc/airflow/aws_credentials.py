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
on spark-submit's command line: ``orphan_tasks.check_spark_master``.) The exchange
itself is the library's (``config.spark_credentials``): the ``ledgergc`` command run
against a cluster makes the same one.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from ledger_gc.config import spark_credentials
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError

#: How long the temporary credentials that replace long-lived keys last (STS allows
#: 900 s to 36 h for an IAM user); ``extra.session_duration_seconds`` overrides it.
SESSION_SECONDS = spark_credentials.SESSION_SECONDS


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
    keys (see the module's docstring). The exchange is the library's
    (``config.spark_credentials.aws_for_spark``, which the ``ledgergc`` command calls
    too); the connection names its STS (``service_config.sts.endpoint_url``, as the
    provider resolves it, never its S3 ``endpoint_url``) and how long a session lasts."""
    if not settings.s3_access_key_id or local_master:
        return settings
    config = ConnectionAwsHook(connection).conn_config if connection is not None else None
    sts_endpoint = (
        config.get_service_endpoint_url("sts", sts_connection_assume=True) if config else None
    )
    extra = (connection.extra_dejson or {}) if connection is not None else {}
    return spark_credentials.aws_for_spark(
        settings,
        local_master=local_master,
        sts_endpoint=sts_endpoint,
        session_seconds=int(extra.get("session_duration_seconds", SESSION_SECONDS)),
        fix=f"give the {connection.conn_id if connection is not None else 'ledgergc_s3'} "
        "connection a role_arn to assume, or no keys (the executors' own instance profile "
        "or IRSA)",
    )


#: Whether an S3 endpoint is AWS's own (``config.spark_credentials``).
is_aws_endpoint = spark_credentials.is_aws_endpoint


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
