"""Settings from Airflow connections and variables, as a provider hook would build them.

The library never imports Airflow; DAG tasks call ``settings_from_airflow`` at run time
(never at parse time) and pass the result down. Precedence, lowest first:
``LEDGERGC_*`` environment variables, the connections, the ``ledgergc_settings`` variable
(JSON), then a DAG run's params.

Connections (all optional; see ``airflow_settings.yaml``):
* ``ledgergc_zookeeper``: host ``h1:2181,h2:2181`` (or host + port), ``extra.chroot``,
  login/password for ZooKeeper digest auth;
* ``ledgergc_s3``: type ``aws``; ``extra.endpoint_url`` (empty: AWS), ``extra.region_name``,
  ``extra.bucket`` and ``extra.prefix``; login/password as the access key pair.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ledger_gc.settings import Settings, TrimRetention, parse_retention_overrides

ZK_CONN_ID = "ledgergc_zookeeper"
S3_CONN_ID = "ledgergc_s3"
SETTINGS_VARIABLE = "ledgergc_settings"

# Variable/param keys -> Settings fields (the LEDGERGC_* names, lower-cased, minus prefix).
_NUMERIC = {"grace_seconds", "retention_seconds", "orphan_max_fraction", "zk_timeout_seconds"}


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
        # boto3 reads credentials from the environment of the worker process.
        os.environ["AWS_ACCESS_KEY_ID"] = conn.login
        os.environ["AWS_SECRET_ACCESS_KEY"] = conn.password or ""
    return changes


def apply_mapping(settings: Settings, values: dict[str, Any]) -> Settings:
    """Apply ``{"grace_seconds": 60, "delete_enabled": true, ...}`` to settings."""
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if value is None or value == "":
            continue
        if key in ("trim_retention_seconds", "trim_retention_bytes"):
            current = changes.get("trim_retention", settings.trim_retention)
            which = "seconds" if key.endswith("seconds") else "bytes"
            changes["trim_retention"] = TrimRetention(**{**current.__dict__, which: int(value)})
        elif key == "trim_retention_overrides":
            changes["trim_retention_overrides"] = parse_retention_overrides(value)
        elif key == "delete_enabled":
            changes[key] = value if isinstance(value, bool) else str(value).lower() == "true"
        elif key in _NUMERIC:
            changes[key] = float(value) if key == "orphan_max_fraction" else int(value)
        else:
            changes[key] = value
    return settings.with_overrides(**changes)


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
    return apply_mapping(settings, params or {})
