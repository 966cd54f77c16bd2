"""Settings from Airflow connections and variables, as a provider hook would build them.

The library never imports Airflow; the tasks of both DAGs call ``settings_for(params)``
at run time (never at parse time) and pass the result down. Precedence, lowest first:
``LEDGERGC_*`` environment variables, the connections, the ``ledgergc_settings`` variable
(JSON), then the run's params that are settings (``RUN_SETTINGS``; the other params,
dry_run, force, namespace, ..., steer the run and are read by the task).

Nothing here writes the worker's environment: credentials go into the Settings, and a
Spark task hands them to its application through spark-submit's environment
(``orphan_tasks``).

Connections (all optional; see ``airflow_settings.yaml``):
* ``ledgergc_zookeeper``: host ``h1:2181,h2:2181`` (or host + port), ``extra.chroot``,
  login/password for ZooKeeper digest auth;
* ``ledgergc_s3``: type ``aws``; ``extra.endpoint_url`` (empty: AWS), ``extra.region_name``,
  ``extra.bucket`` and ``extra.prefix``; login/password as the access key pair,
  ``extra.aws_session_token`` for temporary credentials.

The Amazon provider's ``AwsBaseHook`` is not used: it is not installed (it would add
the provider and its dependencies for a key pair and an endpoint that this reads in a few
lines), and the Spark executors need the credentials as plain values anyway.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ledger_gc.settings import Settings

ZK_CONN_ID = "ledgergc_zookeeper"
S3_CONN_ID = "ledgergc_s3"
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
    from airflow.sdk import BaseHook

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
    extra = conn.extra_dejson or {}
    host = conn.host or ""
    if conn.port and "," not in host and ":" not in host:
        host = f"{host}:{conn.port}"
    chroot = str(extra.get("chroot", "")).strip("/")
    changes: dict[str, Any] = {}
    if host:
        changes["zk_hosts"] = host + (f"/{chroot}" if chroot else "")
    if conn.login:
        changes["zk_digest"] = f"{conn.login}:{conn.password or ''}"
    return changes


def s3_overrides(conn: Any) -> dict[str, Any]:
    extra = conn.extra_dejson or {}
    changes: dict[str, Any] = {}
    if "endpoint_url" in extra:
        changes["s3_endpoint"] = extra["endpoint_url"] or None
    for key, field in (("region_name", "s3_region"), ("bucket", "bucket"), ("prefix", "prefix")):
        if key in extra:
            changes[field] = extra[key]
    if conn.login:
        changes["s3_access_key_id"] = conn.login
        changes["s3_secret_access_key"] = conn.password or ""
        if extra.get("aws_session_token"):
            changes["s3_session_token"] = extra["aws_session_token"]
    return changes


def apply_mapping(
    settings: Settings, values: Mapping[str, Any], source: str = SETTINGS_VARIABLE
) -> Settings:
    """Apply ``{"grace_seconds": 60, "delete_enabled": true, ...}`` to settings.

    Keys and conversions are the settings' own declarations (``Settings.with_values``):
    a quoted number or flag is read as the environment's would be, and checked."""
    return settings.with_values(values, source=source)


def settings_from_airflow(params: dict[str, Any] | None = None) -> Settings:
    """The effective settings of a task: env, connections, variable, then run params."""
    settings = Settings.from_env()
    zk = _connection(ZK_CONN_ID)
    if zk is not None:
        settings = settings.with_overrides(**zookeeper_overrides(zk))
    s3 = _connection(S3_CONN_ID)
    if s3 is not None:
        settings = settings.with_overrides(**s3_overrides(s3))
    settings = apply_mapping(settings, _variable())
    return apply_mapping(settings, params or {}, source="the run's params")


def settings_for(params: Mapping[str, Any] | None) -> Settings:
    """The settings of a task of either DAG: env, connections, variable, then the run's
    params that are settings (``RUN_SETTINGS``)."""
    params = params or {}
    return settings_from_airflow({key: params.get(key) for key in RUN_SETTINGS})


def dag_schedule(variable: str, default: str) -> str | None:
    """A DAG's schedule from ``variable`` (a cron expression or preset; ``none``,
    ``manual`` or empty: manual runs only). Read when the DAG file is parsed: an
    environment variable, no I/O."""
    import os

    value = os.environ.get(variable, default).strip()
    return None if value.lower() in ("", "none", "manual") else value
