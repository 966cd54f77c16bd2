"""One settings object for the whole system.

It is built once, from environment variables (``Settings.from_env``) or from Airflow
connections and variables (``ledger_gc.airflow.hooks``), and passed down. No other module
reads the environment: that keeps the library testable and makes every run's
configuration visible in one place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ledger_gc.errors import ConfigError

DAY = 24 * 3600


@dataclass(frozen=True)
class TrimRetention:
    """Pulsar's retention policy: ``-1`` keeps forever, ``0`` keeps nothing consumed."""

    seconds: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Settings:
    """Everything a trim, an orphan cycle or a managed ledger needs to reach the store."""

    zk_hosts: str = "127.0.0.1:2181"
    zk_timeout_seconds: float = 15.0
    # "user:password": added as digest auth on every session; new znodes then get an ACL
    # that gives that identity all rights and nobody else any.
    zk_digest: str | None = None
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    bucket: str = "ledger-gc"
    prefix: str = "ledgers"
    delete_enabled: bool = False
    grace_seconds: int = DAY
    retention_seconds: int = 7 * DAY
    orphan_max_fraction: float = 0.10
    state_dir: Path = Path("var/state")
    trim_retention: TrimRetention = TrimRetention()
    # "tenant/namespace" -> retention; overrides trim_retention for that namespace.
    trim_retention_overrides: Mapping[str, TrimRetention] = field(default_factory=dict)
    # How long an orphan cycle waits for the delete lock another cycle holds before it
    # deletes nothing this time (orphans/delete_lock.py; issue 11).
    orphan_lock_wait_seconds: float = 300.0

    def __post_init__(self) -> None:
        if not self.zk_hosts.strip():
            raise ConfigError(
                "LEDGERGC_ZK_HOSTS is empty; set it to host:port[,host:port][/chroot]"
            )
        if not self.bucket:
            raise ConfigError("LEDGERGC_BUCKET is empty; set it to the bucket that holds ledgers")
        if self.grace_seconds < 0 or self.retention_seconds < 0:
            raise ConfigError("grace and retention must be >= 0 seconds")
        if not 0 < self.orphan_max_fraction <= 1:
            raise ConfigError("LEDGERGC_ORPHAN_MAX_FRACTION must be in (0, 1]")
        object.__setattr__(self, "prefix", self.prefix.strip("/"))
        object.__setattr__(self, "state_dir", Path(self.state_dir))

    @property
    def zk_chroot(self) -> str:
        """The chroot part of ``zk_hosts`` ("" for none)."""
        _, slash, chroot = self.zk_hosts.partition("/")
        return "/" + chroot.strip("/") if slash and chroot.strip("/") else ""

    @property
    def key_prefix(self) -> str:
        """The prefix that every key of the store starts with ("" or "prefix/")."""
        return f"{self.prefix}/" if self.prefix else ""

    def retention_for(self, ml_name: str) -> TrimRetention:
        """The trim retention of a managed ledger: its namespace's override, or the default."""
        namespace = "/".join(ml_name.split("/")[:2])
        return self.trim_retention_overrides.get(namespace, self.trim_retention)

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with some fields changed (a DAG run's params, a CLI flag)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_env(self) -> dict[str, str]:
        """The ``LEDGERGC_*`` variables that ``from_env`` turns back into these settings:
        how a child process (spark-submit, ``airflow dags test``) gets the same run's."""
        env = {
            "LEDGERGC_ZK_HOSTS": self.zk_hosts,
            "LEDGERGC_ZK_TIMEOUT_SECONDS": str(self.zk_timeout_seconds),
            "LEDGERGC_S3_ENDPOINT": self.s3_endpoint or "",
            "LEDGERGC_S3_REGION": self.s3_region,
            "LEDGERGC_BUCKET": self.bucket,
            "LEDGERGC_PREFIX": self.prefix,
            "LEDGERGC_DELETE_ENABLED": "true" if self.delete_enabled else "false",
            "LEDGERGC_GRACE_SECONDS": str(self.grace_seconds),
            "LEDGERGC_RETENTION_SECONDS": str(self.retention_seconds),
            "LEDGERGC_ORPHAN_MAX_FRACTION": repr(float(self.orphan_max_fraction)),
            "LEDGERGC_STATE_DIR": str(Path(self.state_dir).resolve()),
            "LEDGERGC_TRIM_RETENTION_SECONDS": str(self.trim_retention.seconds),
            "LEDGERGC_TRIM_RETENTION_BYTES": str(self.trim_retention.bytes),
        }
        env["LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS"] = repr(float(self.orphan_lock_wait_seconds))
        if self.zk_digest:
            env["LEDGERGC_ZK_DIGEST"] = self.zk_digest
        if self.trim_retention_overrides:
            env["LEDGERGC_TRIM_RETENTION_OVERRIDES"] = json.dumps(
                {
                    ns: {"seconds": r.seconds, "bytes": r.bytes}
                    for ns, r in self.trim_retention_overrides.items()
                }
            )
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``LEDGERGC_*`` variables (names fixed by DESIGN.md)."""
        env = os.environ if environ is None else environ
        defaults = cls()

        def get(name: str) -> str | None:
            value = env.get(f"LEDGERGC_{name}")
            return value if value not in (None, "") else None

        overrides_raw = get("TRIM_RETENTION_OVERRIDES")
        # --- orphan delete lock (issue 11) ---
        lock_wait = float(
            _number("ORPHAN_LOCK_WAIT_SECONDS", get, defaults.orphan_lock_wait_seconds)
        )
        if lock_wait < 0:
            raise ConfigError("LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS must be >= 0 seconds")
        return cls(
            zk_hosts=get("ZK_HOSTS") or defaults.zk_hosts,
            zk_timeout_seconds=_number("ZK_TIMEOUT_SECONDS", get, defaults.zk_timeout_seconds),
            zk_digest=get("ZK_DIGEST"),
            # An empty LEDGERGC_S3_ENDPOINT means "AWS default", so it is not an error.
            s3_endpoint=get("S3_ENDPOINT"),
            s3_region=get("S3_REGION") or env.get("AWS_DEFAULT_REGION") or defaults.s3_region,
            bucket=get("BUCKET") or defaults.bucket,
            prefix=env.get("LEDGERGC_PREFIX", defaults.prefix),
            delete_enabled=_flag("DELETE_ENABLED", get, defaults.delete_enabled),
            grace_seconds=int(_number("GRACE_SECONDS", get, defaults.grace_seconds)),
            retention_seconds=int(_number("RETENTION_SECONDS", get, defaults.retention_seconds)),
            orphan_max_fraction=_number("ORPHAN_MAX_FRACTION", get, defaults.orphan_max_fraction),
            state_dir=Path(get("STATE_DIR") or defaults.state_dir),
            trim_retention=TrimRetention(
                seconds=int(_number("TRIM_RETENTION_SECONDS", get, 0)),
                bytes=int(_number("TRIM_RETENTION_BYTES", get, 0)),
            ),
            trim_retention_overrides=parse_retention_overrides(overrides_raw),
            orphan_lock_wait_seconds=lock_wait,
        )


def parse_retention_overrides(raw: str | Mapping[str, Any] | None) -> dict[str, TrimRetention]:
    """Parse ``{"tenant/ns": {"seconds": 3600, "bytes": -1}, ...}`` (JSON or a mapping)."""
    if raw is None:
        return {}
    try:
        data = json.loads(raw) if isinstance(raw, str) else dict(raw)
        result = {}
        for namespace, value in data.items():
            if namespace.count("/") != 1:
                raise ValueError(f"namespace {namespace!r} is not tenant/namespace")
            result[namespace] = TrimRetention(
                seconds=int(value.get("seconds", 0)), bytes=int(value.get("bytes", 0))
            )
        return result
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"LEDGERGC_TRIM_RETENTION_OVERRIDES is not valid: {exc}; expected JSON like "
            '{"tenant/ns": {"seconds": 3600, "bytes": -1}}'
        ) from exc


def _number(name: str, get: Any, default: float) -> float:
    raw = get(name)
    if raw is None:
        return default
    try:
        return float(raw) if "." in raw else int(raw)
    except ValueError as exc:
        raise ConfigError(f"LEDGERGC_{name}={raw!r} is not a number") from exc


def _flag(name: str, get: Any, default: bool) -> bool:
    raw = get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"LEDGERGC_{name}={raw!r} is not a boolean (true/false)")
