"""One settings object for the whole system.

It is built once, from environment variables (``Settings.from_env``) or from Airflow
connections and variables (``ledger_gc.airflow.hooks``), and passed down. No other module
reads the environment: that keeps the library testable and makes every run's
configuration visible in one place.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ledger_gc.errors import ConfigError

DAY = 24 * 3600

# ZooKeeper refuses a request over its jute.maxbuffer (default 0xfffff, 1 MiB less one
# byte) by dropping the connection. ledger-gc keeps every write request it sends below
# this, leaving headroom for the request's own framing and a multi's other operations.
DEFAULT_ZK_MAX_RECORD_BYTES = 1_000_000
READ_ONLY_MODES = ("auto", "true", "false")

# botocore's own rules: a region is a DNS label; a bucket name as botocore accepts it
# (legacy names included), so a bucket that S3 has is never refused here.
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")
_BUCKET = re.compile(r"[a-zA-Z0-9.\-_]{1,255}")
_ZK_HOST = re.compile(r"\[?[A-Za-z0-9.:_-]+\]?")
# A Pulsar cluster name as Pulsar accepts it (NamedEntity: letters, digits, "-=:._").
_PULSAR_CLUSTER = re.compile(r"[A-Za-z0-9=:._-]+")
#: In LEDGERGC_PULSAR_CLUSTER: offloaded objects with no cluster name are this store's too.
UNTAGGED_CLUSTER = "(untagged)"


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
    zk_digest: str | None = field(default=None, repr=False)
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    # AWS credentials, from boto3's own variables (AWS_ACCESS_KEY_ID, ...) or the
    # ``ledgergc_s3`` connection; None: boto3's default chain (profile, instance role).
    # Carried in the settings, never put into this process's environment: a Spark
    # executor gets them with the settings its task closes over.
    s3_access_key_id: str | None = field(default=None, repr=False)
    s3_secret_access_key: str | None = field(default=None, repr=False)
    s3_session_token: str | None = field(default=None, repr=False)
    bucket: str = "ledger-gc"
    prefix: str = "ledgers"
    delete_enabled: bool = False
    grace_seconds: int = DAY
    retention_seconds: int = 7 * DAY
    orphan_max_fraction: float = 0.10
    state_dir: Path = Path("var/state")
    # The state store (registry, audit log, run summaries): a SQLAlchemy URL. None: the
    # embedded SQLite file ``<state_dir>/state.sqlite`` (ledger_gc.state.url).
    state_url: str | None = None
    trim_retention: TrimRetention = TrimRetention()
    # "tenant/namespace" -> retention; overrides trim_retention for that namespace.
    trim_retention_overrides: Mapping[str, TrimRetention] = field(default_factory=dict)
    # The largest write request ledger-gc sends to ZooKeeper (see DEFAULT_ZK_MAX_RECORD_BYTES).
    zk_max_record_bytes: int = DEFAULT_ZK_MAX_RECORD_BYTES
    # "auto": read-only when Pulsar brokers are registered; "true"/"false" force it.
    metadata_read_only: str = "auto"
    # Pulsar's tiered storage: "" turns it off.
    offload_bucket: str = ""
    offload_prefix: str = ""
    offload_s3_endpoint: str | None = None
    # The Pulsar cluster names (pulsarClusterName) whose offloaded segments are this
    # store's; empty: learned from the store's live segments (orphans/segments.py).
    pulsar_clusters: tuple[str, ...] = ()
    # How long an orphan cycle waits for the delete lock another cycle holds before it
    # deletes nothing this time (orphans/delete_lock.py).
    orphan_lock_wait_seconds: float = 300.0
    # More registered orphans than this, and the delete step re-checks and deletes them
    # on Spark executors; at most this many, and on one process: the DAG's delete task
    # then starts no Spark application (a JVM costs seconds, the work milliseconds).
    orphan_delete_spark_over: int = 500
    # BookKeeper's ledger metadata (DESIGN.md "BookKeeper ledgers"): "auto" scans it when
    # <root>/LAYOUT exists; its ensemble and chroot default to Pulsar's (zk_hosts).
    bookkeeper: str = "auto"
    bk_ledgers_root: str = "/ledgers"
    bk_zk_hosts: str | None = None
    # Several Pulsar clusters write to this BookKeeper: only ledgers this metadata names
    # by id are deleted (bookkeeper/classify.py).
    bk_shared: bool = False

    def __post_init__(self) -> None:
        """Check every setting's form, so a bad one stops the run before it starts.

        Each error names the variable and the fix (DESIGN.md: exit 2, one line).
        """
        _check_zk_hosts(self.zk_hosts)
        if not self.zk_timeout_seconds > 0:
            raise ConfigError(
                f"LEDGERGC_ZK_TIMEOUT_SECONDS={self.zk_timeout_seconds} must be above 0 seconds"
            )
        if not 4096 <= self.zk_max_record_bytes <= 64 * 1024 * 1024:
            raise ConfigError(
                f"LEDGERGC_ZK_MAX_RECORD_BYTES={self.zk_max_record_bytes} is outside 4096 to "
                "67108864; set it a little below the servers' jute.maxbuffer (default 1 MiB)"
            )
        if self.zk_digest is not None and ":" not in self.zk_digest:
            raise ConfigError("LEDGERGC_ZK_DIGEST must be user:password")
        _check_endpoint("LEDGERGC_S3_ENDPOINT", self.s3_endpoint)
        _check_endpoint("LEDGERGC_OFFLOAD_S3_ENDPOINT", self.offload_s3_endpoint)
        if not _REGION.fullmatch(self.s3_region):
            raise ConfigError(
                f"LEDGERGC_S3_REGION={self.s3_region!r} is not a region name (letters, digits "
                "and '-', e.g. us-east-1)"
            )
        # An empty bucket turns the S3 block source off (a Pulsar cluster keeps its data
        # in BookKeeper); the trim and the managed-ledger library then refuse to run.
        for name, bucket in (
            ("LEDGERGC_BUCKET", self.bucket),
            ("LEDGERGC_OFFLOAD_BUCKET", self.offload_bucket),
        ):
            if bucket and not _BUCKET.fullmatch(bucket):
                raise ConfigError(
                    f"{name}={bucket!r} is not a bucket name (letters, digits, '.', '-', '_')"
                )
        for name, seconds in (
            ("LEDGERGC_GRACE_SECONDS", self.grace_seconds),
            ("LEDGERGC_RETENTION_SECONDS", self.retention_seconds),
        ):
            if seconds < 0:
                raise ConfigError(f"{name}={seconds} must be 0 or more seconds")
        if not 0 < self.orphan_max_fraction <= 1:
            raise ConfigError(
                f"LEDGERGC_ORPHAN_MAX_FRACTION={self.orphan_max_fraction} must be above 0 "
                "and at most 1 (e.g. 0.10)"
            )
        _check_retention("LEDGERGC_TRIM_RETENTION", self.trim_retention)
        for namespace, retention in self.trim_retention_overrides.items():
            _check_retention(f"LEDGERGC_TRIM_RETENTION_OVERRIDES[{namespace}]", retention)
        if self.metadata_read_only not in READ_ONLY_MODES:
            raise ConfigError(
                f"LEDGERGC_METADATA_READ_ONLY={self.metadata_read_only!r} must be auto, true "
                "or false"
            )
        _check_pulsar_clusters(self.pulsar_clusters)
        # Checked here, not in from_env alone: the Airflow variable and run params build
        # settings too (issue 20: a quoted number there used to pass unchecked).
        if not self.orphan_lock_wait_seconds >= 0:
            raise ConfigError("LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS must be >= 0 seconds")
        if not self.orphan_delete_spark_over >= 0:
            raise ConfigError("LEDGERGC_ORPHAN_DELETE_SPARK_OVER must be >= 0 orphans")
        if self.bookkeeper not in READ_ONLY_MODES:
            raise ConfigError(
                f"LEDGERGC_BOOKKEEPER={self.bookkeeper!r} must be auto, true or false"
            )
        if self.bk_zk_hosts is not None:
            _check_zk_hosts(self.bk_zk_hosts, name="LEDGERGC_BK_ZK_HOSTS")
        root = self.bk_ledgers_root
        if (
            not root.startswith("/")
            or root != "/" + root.strip("/")
            or root == "/"
            or "//" in root
            or any(part in (".", "..") for part in root.split("/"))
        ):
            raise ConfigError(
                f"LEDGERGC_BK_LEDGERS_ROOT={root!r} is not a znode path like /ledgers "
                "(BookKeeper's zkLedgersRootPath, below the chroot of LEDGERGC_BK_ZK_HOSTS)"
            )
        object.__setattr__(self, "prefix", self.prefix.strip("/"))
        object.__setattr__(self, "offload_prefix", self.offload_prefix.strip("/"))
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        if self.state_url is not None:
            from ledger_gc.state.url import check_state_url

            object.__setattr__(self, "state_url", check_state_url(self.state_url))

    def check_state_dir(self) -> Path:
        """Make sure the state dir exists and is writable, before anything runs.

        The audit log lives there, and a deletion that cannot be audited is not made: a
        state dir that is a file, or read-only, must stop a run before its first mark, not
        after its first delete.
        """
        path = Path(self.state_dir)
        if path.exists() and not path.is_dir():
            raise ConfigError(
                f"LEDGERGC_STATE_DIR={path} is a file, not a directory; point it at a "
                "directory (it is created if missing)"
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"LEDGERGC_STATE_DIR={path} cannot be created ({exc.strerror}); point it at "
                "a writable directory"
            ) from exc
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(
                f"LEDGERGC_STATE_DIR={path} is not writable; point it at a writable directory"
            )
        return path

    @property
    def zk_chroot(self) -> str:
        """The chroot part of ``zk_hosts`` ("" for none)."""
        _, slash, chroot = self.zk_hosts.partition("/")
        return "/" + chroot.strip("/") if slash and chroot.strip("/") else ""

    @property
    def block_store(self) -> bool:
        """Whether the S3 block source is on (``LEDGERGC_BUCKET`` set)."""
        return bool(self.bucket)

    @property
    def bookkeeper_hosts(self) -> str:
        """Where BookKeeper's metadata lives: ``LEDGERGC_BK_ZK_HOSTS``, else Pulsar's."""
        return self.bk_zk_hosts or self.zk_hosts

    def bookkeeper_settings(self) -> Settings:
        """These settings pointed at BookKeeper's ensemble and chroot (its sessions)."""
        if self.bk_zk_hosts is None or self.bk_zk_hosts == self.zk_hosts:
            return self
        return replace(self, zk_hosts=self.bk_zk_hosts)

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
            "LEDGERGC_ZK_MAX_RECORD_BYTES": str(self.zk_max_record_bytes),
            "LEDGERGC_METADATA_READ_ONLY": self.metadata_read_only,
            "LEDGERGC_OFFLOAD_BUCKET": self.offload_bucket,
            "LEDGERGC_OFFLOAD_PREFIX": self.offload_prefix,
            "LEDGERGC_OFFLOAD_S3_ENDPOINT": self.offload_s3_endpoint or "",
            "LEDGERGC_PULSAR_CLUSTER": ",".join(self.pulsar_clusters),
            "LEDGERGC_BOOKKEEPER": self.bookkeeper,
            "LEDGERGC_BK_LEDGERS_ROOT": self.bk_ledgers_root,
            "LEDGERGC_BK_ZK_HOSTS": self.bk_zk_hosts or "",
            "LEDGERGC_BK_SHARED": "true" if self.bk_shared else "false",
        }
        if self.state_url:
            env["LEDGERGC_STATE_URL"] = self.state_url
        env["LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS"] = repr(float(self.orphan_lock_wait_seconds))
        env["LEDGERGC_ORPHAN_DELETE_SPARK_OVER"] = str(self.orphan_delete_spark_over)
        if self.zk_digest:
            env["LEDGERGC_ZK_DIGEST"] = self.zk_digest
        for name, value in self.aws_credentials_env().items():
            env[name] = value
        if self.trim_retention_overrides:
            env["LEDGERGC_TRIM_RETENTION_OVERRIDES"] = json.dumps(
                {
                    ns: {"seconds": r.seconds, "bytes": r.bytes}
                    for ns, r in self.trim_retention_overrides.items()
                }
            )
        return env

    def aws_credentials_env(self) -> dict[str, str]:
        """The credentials as boto3's variables (for a child process), if any are set."""
        named = {
            "AWS_ACCESS_KEY_ID": self.s3_access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.s3_secret_access_key,
            "AWS_SESSION_TOKEN": self.s3_session_token,
        }
        return {name: value for name, value in named.items() if value}

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
        spark_over = int(
            _number(
                "ORPHAN_DELETE_SPARK_OVER", get, defaults.orphan_delete_spark_over, integer=True
            )
        )
        if spark_over < 0:
            raise ConfigError("LEDGERGC_ORPHAN_DELETE_SPARK_OVER must be >= 0 orphans")
        return cls(
            zk_hosts=get("ZK_HOSTS") or defaults.zk_hosts,
            zk_timeout_seconds=_number("ZK_TIMEOUT_SECONDS", get, defaults.zk_timeout_seconds),
            zk_digest=get("ZK_DIGEST"),
            s3_access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            s3_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            s3_session_token=env.get("AWS_SESSION_TOKEN") or None,
            # An empty LEDGERGC_S3_ENDPOINT means "AWS default", so it is not an error.
            s3_endpoint=get("S3_ENDPOINT"),
            s3_region=get("S3_REGION") or env.get("AWS_DEFAULT_REGION") or defaults.s3_region,
            # Set but empty: the S3 block source is off (DESIGN.md "BookKeeper ledgers").
            bucket="" if env.get("LEDGERGC_BUCKET") == "" else get("BUCKET") or defaults.bucket,
            prefix=env.get("LEDGERGC_PREFIX", defaults.prefix),
            delete_enabled=_flag("DELETE_ENABLED", get, defaults.delete_enabled),
            grace_seconds=int(_number("GRACE_SECONDS", get, defaults.grace_seconds, integer=True)),
            retention_seconds=int(
                _number("RETENTION_SECONDS", get, defaults.retention_seconds, integer=True)
            ),
            orphan_max_fraction=_number("ORPHAN_MAX_FRACTION", get, defaults.orphan_max_fraction),
            state_dir=Path(get("STATE_DIR") or defaults.state_dir),
            state_url=get("STATE_URL"),
            trim_retention=TrimRetention(
                seconds=int(_number("TRIM_RETENTION_SECONDS", get, 0, integer=True)),
                bytes=int(_number("TRIM_RETENTION_BYTES", get, 0, integer=True)),
            ),
            trim_retention_overrides=parse_retention_overrides(overrides_raw),
            zk_max_record_bytes=int(
                _number("ZK_MAX_RECORD_BYTES", get, DEFAULT_ZK_MAX_RECORD_BYTES, integer=True)
            ),
            metadata_read_only=(get("METADATA_READ_ONLY") or "auto").strip().lower(),
            offload_bucket=get("OFFLOAD_BUCKET") or "",
            offload_prefix=get("OFFLOAD_PREFIX") or "",
            offload_s3_endpoint=get("OFFLOAD_S3_ENDPOINT"),
            pulsar_clusters=parse_pulsar_clusters(env.get("LEDGERGC_PULSAR_CLUSTER")),
            orphan_lock_wait_seconds=lock_wait,
            orphan_delete_spark_over=spark_over,
            bookkeeper=(get("BOOKKEEPER") or defaults.bookkeeper).strip().lower(),
            bk_ledgers_root=get("BK_LEDGERS_ROOT") or defaults.bk_ledgers_root,
            bk_zk_hosts=get("BK_ZK_HOSTS"),
            bk_shared=_flag("BK_SHARED", get, defaults.bk_shared),
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


def parse_pulsar_clusters(raw: str | None) -> tuple[str, ...]:
    """``LEDGERGC_PULSAR_CLUSTER``: comma-separated names ("" or unset: none)."""
    if raw is None or not raw.strip():
        return ()
    return tuple(name.strip() for name in raw.split(","))


def _check_pulsar_clusters(names: tuple[str, ...]) -> None:
    for name in names:
        if name != UNTAGGED_CLUSTER and not _PULSAR_CLUSTER.fullmatch(name):
            raise ConfigError(
                f"LEDGERGC_PULSAR_CLUSTER={','.join(names)!r}: {name!r} is not a Pulsar "
                "cluster name (letters, digits and '-=:._'); list this store's clusters "
                f"comma-separated, e.g. us-east or us-east,{UNTAGGED_CLUSTER}"
            )


def _number(name: str, get: Any, default: float, *, integer: bool = False) -> float:
    raw = get(name)
    if raw is None:
        return default
    try:
        return int(raw.strip()) if integer else float(raw) if "." in raw else int(raw)
    except ValueError as exc:
        kind = "a whole number" if integer else "a number"
        raise ConfigError(f"LEDGERGC_{name}={raw!r} is not {kind}") from exc


def _check_zk_hosts(hosts: str, name: str = "LEDGERGC_ZK_HOSTS") -> None:
    example = "set it to host:port[,host:port][/chroot], e.g. zk1:2181,zk2:2181/pulsar"
    if not hosts.strip():
        raise ConfigError(f"{name} is empty; {example}")
    servers, slash, chroot = hosts.partition("/")
    for server in servers.split(","):
        host, colon, port = (
            server.strip().rpartition(":") if ":" in server else (server.strip(), "", "")
        )
        if not host or not _ZK_HOST.fullmatch(host):
            raise ConfigError(f"{name}={hosts!r}: {server!r} has no host; {example}")
        if colon and not (port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(
                f"{name}={hosts!r}: port {port!r} of {server!r} is not a port "
                f"number (1-65535); {example}"
            )
    if slash and chroot:
        parts = chroot.rstrip("/").split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ConfigError(
                f"{name}={hosts!r}: chroot /{chroot} is not a ZooKeeper path; {example}"
            )


def _check_endpoint(name: str, url: str | None) -> None:
    if not url:
        return
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise ConfigError(
            f"{name}={url!r} is not an endpoint URL; set it like http://127.0.0.1:9000 or "
            "https://s3.example.com (empty: AWS)"
        )


def _check_retention(name: str, retention: TrimRetention) -> None:
    for unit, value in (("SECONDS", retention.seconds), ("BYTES", retention.bytes)):
        if value < -1:
            raise ConfigError(f"{name}_{unit}={value} must be -1 (keep forever), 0 (none) or more")


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
