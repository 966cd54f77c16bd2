"""One settings object for the whole system, each setting declared once.

It is built once, from environment variables (``Settings.from_env``) or from Airflow
connections and variables (``ledger_gc.airflow.settings_hook.LedgerGcHook``), and passed
down. No other module reads the environment: that keeps the library testable and makes
every run's configuration visible in one place.

Each field is declared with its ``SettingSpec`` (``ledger_gc.config.settings_schema``): the
``LEDGERGC_*`` variable, the kind of value, bounds, secrecy and a line for the README.
``from_env``, ``to_env``, ``with_values`` (the ``ledgergc_settings`` variable and run
params), the checks in ``__post_init__``, ``secrets`` (what Airflow masks) and the README's
table (``ledger_gc.config.settings_table``) all loop over those declarations, so a new setting is
one field here and nothing else can forget it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ledger_gc.config import broker_conf
from ledger_gc.config.endpoints import (
    BOOKKEEPER,
    DEFAULT_ZK_MAX_RECORD_BYTES,
    PULSAR,
    check_state_dir,
)
from ledger_gc.config.setting_forms import (
    as_zk_address,
    check_bucket,
    check_config_store_address,
    check_digest,
    check_endpoint,
    check_ledgers_root,
    check_offload_driver,
    check_pulsar_clusters,
    check_region,
    check_zk_address,
)
from ledger_gc.config.settings_schema import (
    FLAG,
    INTEGER,
    NAMES,
    NUMBER,
    PATH,
    SECRET_AFTER_COLON,
    SECRET_URL_PASSWORD,
    SECRET_WHOLE,
    TEXT,
    WORD,
    Kind,
    Origin,
    SettingSpec,
    declared,
    default_of,
    setting,
    setting_factory,
)
from ledger_gc.config.zk_addresses import DEFAULT_LEDGERS_ROOT, ZkAddress, parse_zk_address
from ledger_gc.config.zk_security import (
    BOOKKEEPER_PREFIX,
    CONFIG_STORE_PREFIX,
    PULSAR_NAMES,
    PULSAR_PREFIX,
    Names,
    ZkSecurity,
    names_for,
)
from ledger_gc.config.zk_security import specs as zk_security_specs
from ledger_gc.errors import ConfigError
from ledger_gc.rules.storage.offload_drivers import family as offload_family
from ledger_gc.rules.trim.eligibility import TrimRetention

#: The variable of the offload driver (``Settings.with_broker_conf``).
DRIVER_ENV = "LEDGERGC_OFFLOAD_DRIVER"

DAY = 24 * 3600

READ_ONLY_MODES = ("auto", "true", "false")
#: A ZooKeeper address (``ledger_gc.config.zk_addresses``): text in any of Pulsar's and
#: BookKeeper's forms, kept as a ``ZkAddress``, written back as its one spelling that
#: reads the same (a ``zk+…://`` URL keeps its ledgers root and manager in a child).
ZK_ADDRESS = Kind(
    "a ZooKeeper address",
    str,
    lambda value: value if isinstance(value, ZkAddress) else TEXT.accept(value),
    lambda address: address.text,
)


#: Pulsar's defaults (DESIGN.md): consumed ledgers go at once.
PULSAR_DEFAULT_RETENTION = TrimRetention()
DEFAULT_STATE_DIR = Path("var/state")


@dataclass(frozen=True)
class Settings:
    """Everything a trim, an orphan cycle or a managed ledger needs to reach the store.

    Every field is a ``setting(default, SettingSpec(...))``: its declaration is the one
    place that names its variable, kind, bounds, secrecy and documentation. A value given
    as text (a quoted number in a JSON variable) is converted by the field's kind, and
    every value is checked when the settings are made, whoever made them.
    """

    # Pulsar's ensemble; ``zk_hosts`` is its kazoo connect string.
    zk_address: ZkAddress = setting(
        parse_zk_address("LEDGERGC_ZK_HOSTS", "127.0.0.1:2181"),
        SettingSpec(
            "LEDGERGC_ZK_HOSTS",
            ZK_ADDRESS,
            "Pulsar's ZooKeeper: `host:port[,host:port…][/chroot]`, or as broker.conf's "
            "`metadataStoreUrl` has it (`zk:…`, `metadata-store:zk:…`), or BookKeeper's "
            "`zk+hierarchical://h1:2181;h2:2181/ledgers` (its path: the ledgers root)",
            check=check_zk_address,
            normalize=as_zk_address,
        ),
    )
    # "user:password": added as digest auth on every session; new znodes then get an ACL
    # that gives that identity all rights and nobody else any.
    zk_digest: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_ZK_DIGEST",
            TEXT,
            "`user:password` for ZooKeeper digest auth; new znodes get a digest ACL",
            check=check_digest,
            secret=SECRET_AFTER_COLON,
            omit_when_empty=True,
        ),
    )
    zk_timeout_seconds: float = setting(
        15.0,
        SettingSpec(
            "LEDGERGC_ZK_TIMEOUT_SECONDS",
            NUMBER,
            "session timeout; a lost session fails the run closed",
            minimum=0,
            exclusive_minimum=True,
            unit="seconds",
        ),
    )
    # TLS and SASL of ZooKeeper sessions (ledger_gc.config.zk_security): a composite of
    # LEDGERGC_ZK_TLS*, LEDGERGC_ZK_SASL_* and LEDGERGC_ZK_JAAS, each part None while unset.
    zk_security: ZkSecurity = setting(ZkSecurity(), *zk_security_specs(PULSAR_PREFIX))
    s3_endpoint: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_S3_ENDPOINT",
            TEXT,
            "S3 endpoint URL (SeaweedFS, MinIO, Ceph, …)",
            check=check_endpoint,
            default_doc="empty: AWS",
        ),
    )
    s3_region: str = setting(
        "us-east-1",
        SettingSpec(
            "LEDGERGC_S3_REGION",
            TEXT,
            "region (or `AWS_DEFAULT_REGION`)",
            check=check_region,
            fallback_env="AWS_DEFAULT_REGION",
        ),
    )
    # AWS credentials, from boto3's own variables (AWS_ACCESS_KEY_ID, ...) or the
    # ``ledgergc_s3`` connection; None: boto3's default chain (profile, instance role).
    # Carried in the settings, never put into this process's environment: a Spark
    # executor gets them with the settings its task closes over. The key id names an
    # identity and is no secret (AWS), but stays out of repr with its key.
    s3_access_key_id: str | None = setting(
        None,
        SettingSpec("AWS_ACCESS_KEY_ID", TEXT, "the access key id (boto3's)", omit_when_empty=True),
        repr=False,
    )
    s3_secret_access_key: str | None = setting(
        None,
        SettingSpec(
            "AWS_SECRET_ACCESS_KEY",
            TEXT,
            "the secret access key (boto3's)",
            secret=SECRET_WHOLE,
            omit_when_empty=True,
        ),
    )
    s3_session_token: str | None = setting(
        None,
        SettingSpec(
            "AWS_SESSION_TOKEN",
            TEXT,
            "the session token of temporary credentials (boto3's)",
            secret=SECRET_WHOLE,
            omit_when_empty=True,
        ),
    )
    bucket: str = setting(
        "ledger-gc",
        SettingSpec(
            "LEDGERGC_BUCKET",
            TEXT,
            "the bucket holding ledger blocks; set but empty: no block store (a Pulsar "
            "cluster, whose data is in BookKeeper): the orphan cycle runs the BookKeeper and "
            "tiered-storage sources, the trim refuses",
            # Set but empty: the S3 block source is off (DESIGN.md "BookKeeper ledgers").
            check=check_bucket,
            empty_is_set=True,
        ),
    )
    prefix: str = setting(
        "ledgers",
        SettingSpec(
            "LEDGERGC_PREFIX",
            TEXT,
            "key prefix of the store inside the bucket",
            normalize=lambda prefix: prefix.strip("/"),
            empty_is_set=True,
        ),
    )
    delete_enabled: bool = setting(
        False,
        SettingSpec("LEDGERGC_DELETE_ENABLED", FLAG, "orphan removal deletes only when `true`"),
    )
    grace_seconds: int = setting(
        DAY,
        SettingSpec(
            "LEDGERGC_GRACE_SECONDS",
            INTEGER,
            "an orphan must stay orphaned this long before deletion",
            minimum=0,
            unit="seconds",
        ),
    )
    retention_seconds: int = setting(
        7 * DAY,
        SettingSpec(
            "LEDGERGC_RETENTION_SECONDS",
            INTEGER,
            "an orphan's newest object must be older than this",
            minimum=0,
            unit="seconds",
        ),
    )
    orphan_max_fraction: float = setting(
        0.10,
        SettingSpec(
            "LEDGERGC_ORPHAN_MAX_FRACTION",
            NUMBER,
            "refuse to delete when orphans exceed this share of all bytes",
            minimum=0,
            exclusive_minimum=True,
            maximum=1,
            hint="e.g. 0.10",
        ),
    )
    # How long an orphan cycle waits for the delete lock another cycle holds before it
    # deletes nothing this time (orphans/delete_lock.py).
    orphan_lock_wait_seconds: float = setting(
        300.0,
        SettingSpec(
            "LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS",
            NUMBER,
            "how long a cycle waits for another cycle's delete lock before it deletes "
            "nothing this time",
            minimum=0,
            unit="seconds",
        ),
    )
    # More registered orphans than this, and the delete step re-checks and deletes them
    # on Spark executors; at most this many, and on one process: the DAG's delete task
    # then starts no Spark application (a JVM costs seconds, the work milliseconds).
    orphan_delete_spark_over: int = setting(
        500,
        SettingSpec(
            "LEDGERGC_ORPHAN_DELETE_SPARK_OVER",
            INTEGER,
            "with more registered orphans than this, the DAG's `delete` task submits a Spark "
            "application, which re-checks and deletes on executors when more than this many "
            "are due (else on its driver); with at most this many registered, the task does "
            "it itself and starts no Spark application.",
            minimum=0,
            unit="orphans",
        ),
    )
    # The state store (registry, audit log, run summaries): a SQLAlchemy URL. None: the
    # embedded SQLite file ``<state_dir>/state.sqlite`` (ledger_gc.state.url).
    state_url: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_STATE_URL",
            TEXT,
            "the state store (orphan registry, audit log, run summaries): a SQLAlchemy URL, "
            "`postgresql+psycopg://user:password@host:5432/db` in a deployment",
            normalize=lambda url: _checked_state_url(url),
            secret=SECRET_URL_PASSWORD,
            omit_when_empty=True,
            default_doc="SQLite in the state dir",
        ),
    )
    state_dir: Path = setting(
        DEFAULT_STATE_DIR,
        SettingSpec(
            "LEDGERGC_STATE_DIR",
            PATH,
            "the default state store `state.sqlite` (and a run folder the survey removes "
            "at its end)",
        ),
    )
    trim_retention: TrimRetention = setting(
        PULSAR_DEFAULT_RETENTION,
        SettingSpec(
            "LEDGERGC_TRIM_RETENTION_SECONDS",
            INTEGER,
            "Pulsar retention time (`-1` keeps forever)",
            part="seconds",
            minimum=-1,
            hint="-1 keeps forever, 0 keeps nothing consumed",
        ),
        SettingSpec(
            "LEDGERGC_TRIM_RETENTION_BYTES",
            INTEGER,
            "Pulsar retention size (`-1` keeps forever)",
            part="bytes",
            minimum=-1,
            hint="-1 keeps forever, 0 keeps nothing consumed",
        ),
    )
    # "tenant/namespace" -> retention; overrides trim_retention for that namespace.
    trim_retention_overrides: Mapping[str, TrimRetention] = setting_factory(
        dict,
        SettingSpec(
            "LEDGERGC_TRIM_RETENTION_OVERRIDES",
            Kind(
                'JSON like {"tenant/ns": {"seconds": 3600, "bytes": -1}}',
                lambda raw: parse_retention_overrides(raw),
                lambda value: parse_retention_overrides(value),
                lambda overrides: json.dumps(
                    {ns: {"seconds": r.seconds, "bytes": r.bytes} for ns, r in overrides.items()}
                ),
            ),
            'JSON `{"tenant/ns": {"seconds": 3600, "bytes": -1}}`',
            check=lambda env, overrides: check_overrides(env, overrides),
            omit_when_empty=True,
        ),
    )
    # The largest write request ledger-gc sends to ZooKeeper (see DEFAULT_ZK_MAX_RECORD_BYTES).
    zk_max_record_bytes: int = setting(
        DEFAULT_ZK_MAX_RECORD_BYTES,
        SettingSpec(
            "LEDGERGC_ZK_MAX_RECORD_BYTES",
            INTEGER,
            "the largest write sent to ZooKeeper; keep it below the servers' `jute.maxbuffer`",
            minimum=4096,
            maximum=64 * 1024 * 1024,
            unit="bytes",
            hint="set it a little below the servers' jute.maxbuffer (default 1 MiB)",
        ),
    )
    # "auto": read-only when Pulsar brokers are registered; "true"/"false" force it.
    metadata_read_only: str = setting(
        "auto",
        SettingSpec(
            "LEDGERGC_METADATA_READ_ONLY",
            WORD,
            "`auto`: read-only when Pulsar brokers are registered; `true`; `false`",
            choices=READ_ONLY_MODES,
        ),
    )
    # Pulsar's tiered storage: "" turns it off.
    offload_bucket: str = setting(
        "",
        SettingSpec(
            "LEDGERGC_OFFLOAD_BUCKET",
            TEXT,
            "Pulsar's tiered-storage bucket (empty: tiered storage off); the trim deletes a "
            "marked ledger's offloaded copy there, the orphan cycle scans it for orphan "
            "segments",
            check=check_bucket,
        ),
    )
    offload_prefix: str = setting(
        "",
        SettingSpec(
            "LEDGERGC_OFFLOAD_PREFIX",
            TEXT,
            "the offloader's key prefix inside that bucket",
            normalize=lambda prefix: prefix.strip("/"),
        ),
    )
    # Which store Pulsar offloads to (rules.storage.offload_drivers: Pulsar's driver
    # strings, matched ignoring case, and the families' own names).
    offload_driver: str = setting(
        "aws-s3",
        SettingSpec(
            "LEDGERGC_OFFLOAD_DRIVER",
            TEXT,
            "the offloader's driver, as broker.conf's `managedLedgerOffloadDriver`: `aws-s3`, "
            "`S3`, `aliyun-oss` (S3's API), `google-cloud-storage`, `azureblob`",
            check=check_offload_driver,
        ),
    )
    offload_endpoint: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_OFFLOAD_ENDPOINT",
            TEXT,
            "its endpoint, when not the cloud's own (an S3-compatible store, fake-gcs-server, "
            "Azurite); the old name `LEDGERGC_OFFLOAD_S3_ENDPOINT` still works",
            check=check_endpoint,
            default_doc="S3: `LEDGERGC_S3_ENDPOINT`; GCS, Azure: the cloud's",
            fallback_env="LEDGERGC_OFFLOAD_S3_ENDPOINT",
            also_keys=("offload_s3_endpoint",),
        ),
    )
    offload_s3_region: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_OFFLOAD_S3_REGION",
            TEXT,
            "its region, when it differs (broker.conf's `s3ManagedLedgerOffloadRegion`)",
            check=check_region,
            default_doc="`LEDGERGC_S3_REGION`",
        ),
    )
    # Google Cloud Storage's credentials: a service account's key file (the brokers' own
    # gcsManagedLedgerOffloadServiceAccountKeyFile), exchanged at the edge for an access
    # token, or a token minted by the Airflow task (airflow.gcp_credentials). Neither: an
    # endpoint's emulator is anonymous, Google's own is application default credentials.
    offload_gcs_key_file: Path | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_OFFLOAD_GCS_KEY_FILE",
            PATH,
            "a GCS service account's JSON key file (broker.conf's "
            "`gcsManagedLedgerOffloadServiceAccountKeyFile`); exchanged for an access token "
            "once per run, never handed to a child process",
            default_doc="application default credentials",
            inherited=False,
        ),
    )
    offload_gcs_token: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_OFFLOAD_GCS_TOKEN",
            TEXT,
            "a GCS OAuth2 access token (short-lived; what a Spark application is handed)",
            secret=SECRET_WHOLE,
            omit_when_empty=True,
        ),
    )
    offload_gcs_project: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_OFFLOAD_GCS_PROJECT",
            TEXT,
            "the GCS project (the key's or ADC's when unset)",
            omit_when_empty=True,
        ),
    )
    # Azure Blob Storage's credentials, by the variables Pulsar's brokers read
    # (AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_ACCESS_KEY) and the SDK's connection string;
    # or a SAS (one the Airflow task minted: airflow.azure_credentials).
    azure_storage_account: str | None = setting(
        None,
        SettingSpec(
            "AZURE_STORAGE_ACCOUNT",
            TEXT,
            "the Azure storage account (as Pulsar's brokers read it)",
            omit_when_empty=True,
        ),
    )
    azure_storage_key: str | None = setting(
        None,
        SettingSpec(
            "AZURE_STORAGE_ACCESS_KEY",
            TEXT,
            "its account key (as Pulsar's brokers read it)",
            secret=SECRET_WHOLE,
            omit_when_empty=True,
        ),
    )
    azure_storage_sas: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_OFFLOAD_AZURE_SAS",
            TEXT,
            "a SAS token for the container (short-lived; what a Spark application is handed)",
            secret=SECRET_WHOLE,
            omit_when_empty=True,
        ),
    )
    azure_soft_delete_days: int = setting(
        -1,
        SettingSpec(
            "LEDGERGC_OFFLOAD_AZURE_SOFT_DELETE_DAYS",
            INTEGER,
            "the account's blob soft delete retention (0: off), as read with the account "
            "key when a Spark application is handed a container SAS in its place (which "
            "cannot read the account's properties); set by ledger-gc with that SAS; -1: "
            "read it",
            minimum=-1,
            unit="days",
        ),
    )
    azure_storage_connection_string: str | None = setting(
        None,
        SettingSpec(
            "AZURE_STORAGE_CONNECTION_STRING",
            TEXT,
            "an Azure Storage connection string (the SDK's; Azurite's)",
            secret=SECRET_WHOLE,
            omit_when_empty=True,
        ),
    )
    # BookKeeper's ledger metadata (DESIGN.md "BookKeeper ledgers"): "auto" scans it when
    # <root>/LAYOUT exists; its ensemble and chroot default to Pulsar's (zk_hosts).
    bookkeeper: str = setting(
        "auto",
        SettingSpec(
            "LEDGERGC_BOOKKEEPER",
            WORD,
            "scan BookKeeper's ledger metadata: `auto` when `<root>/LAYOUT` exists, `true` "
            "(refuse, exit 2, when it does not), `false`",
            choices=READ_ONLY_MODES,
        ),
    )
    # None: the path of a zk+...:// address, else /ledgers (``bookkeeper_root``).
    bk_ledgers_root: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_BK_LEDGERS_ROOT",
            TEXT,
            "BookKeeper's `zkLedgersRootPath` (the path of `metadataServiceUri`), below the "
            "chroot of `LEDGERGC_BK_ZK_HOSTS`; with a `zk+…://` address it must be that "
            "address's path",
            check=check_ledgers_root,
            omit_when_empty=True,
            default_doc="`/ledgers`, or the path of a `zk+…://` address",
        ),
    )
    # BookKeeper's ensemble, when not Pulsar's; ``bk_zk_hosts`` is its connect string.
    bk_zk_address: ZkAddress | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_BK_ZK_HOSTS",
            ZK_ADDRESS,
            "BookKeeper's ensemble and chroot, when they are not Pulsar's: any form of "
            "`LEDGERGC_ZK_HOSTS`, as broker.conf's `bookkeeperMetadataServiceUri` has it "
            "(`metadata-store:zk:h1:2181/chroot`: `/ledgers` below the chroot; "
            "`zk+hierarchical://h1:2181;h2:2181/ledgers`: the path is the ledgers root, and "
            "a manager other than `LAYOUT` names is refused)",
            check=check_zk_address,
            normalize=as_zk_address,
            default_doc="`LEDGERGC_ZK_HOSTS`",
        ),
    )
    # BookKeeper's ensemble's TLS and SASL: LEDGERGC_BK_ZK_*, each unset part Pulsar's.
    bk_zk_security: ZkSecurity = setting(ZkSecurity(), *zk_security_specs(BOOKKEEPER_PREFIX))
    # Pulsar's configuration store (tenants, namespaces' policies, partitioned topics),
    # when it is not the local store: LEDGERGC_CONFIG_STORE_*, each unset part the local
    # store's (``configuration_address``, ``configuration_security``).
    config_store_address: ZkAddress | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_CONFIG_STORE_HOSTS",
            ZK_ADDRESS,
            "Pulsar's configuration store (tenants, namespaces' policies, partitioned-topic "
            "metadata), as broker.conf's `configurationMetadataStoreUrl` has it "
            "(`zk:h1:2181/global`, `h1:2181,h2:2181/chroot`, `metadata-store:zk:…`); empty: "
            "the local store",
            check=check_config_store_address,
            normalize=as_zk_address,
            default_doc="the local store (`LEDGERGC_ZK_HOSTS`)",
        ),
    )
    config_store_security: ZkSecurity = setting(
        ZkSecurity(), *zk_security_specs(CONFIG_STORE_PREFIX)
    )
    config_store_digest: str | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_CONFIG_STORE_DIGEST",
            TEXT,
            "as `LEDGERGC_ZK_DIGEST`, for the configuration store",
            check=check_digest,
            secret=SECRET_AFTER_COLON,
            omit_when_empty=True,
            default_doc="`LEDGERGC_ZK_DIGEST`",
        ),
    )
    # The Pulsar-metadata source (DESIGN.md "Pulsar's own metadata").
    pulsar_metadata: str = setting(
        "auto",
        SettingSpec(
            "LEDGERGC_PULSAR_METADATA",
            WORD,
            "reclaim what deleted tenants, namespaces and dead brokers leave in ZooKeeper: "
            "`auto` (on when `/managed-ledgers` exists), `true`, `false`",
            choices=READ_ONLY_MODES,
        ),
    )
    # Several Pulsar clusters write to this BookKeeper: only ledgers this metadata names
    # by id are deleted (rules/bookkeeper/classify.py).
    bk_shared: bool = setting(
        False,
        SettingSpec(
            "LEDGERGC_BK_SHARED",
            FLAG,
            "`true`: other Pulsar clusters write to this BookKeeper; only ledgers this "
            "metadata names by id (`bk-offloaded-copy`) are deleted",
        ),
    )
    # Unreadable ledger records (Pulsar 13480: an empty ledger znode stops BookKeeper's
    # auditor): removed under the three phases when no Pulsar record names them.
    bk_remove_unreadable: bool = setting(
        False,
        SettingSpec(
            "LEDGERGC_BK_REMOVE_UNREADABLE",
            FLAG,
            "`true`: a BookKeeper ledger whose metadata record is empty or does not decode "
            "(`bk-unreadable`, Pulsar 13480: it stops BookKeeper's auditor) and that no "
            "Pulsar record names is removed under the three phases; `false`: reported",
        ),
    )
    # What a cycle costs ZooKeeper (DESIGN.md "Cost to ZooKeeper"): CLOSED ledgers'
    # records kept between cycles (bookkeeper/record_cache.py), a full read every so
    # many cycles, and a bound on the reads per second of the whole cycle.
    bk_record_cache: bool = setting(
        True,
        SettingSpec(
            "LEDGERGC_BK_RECORD_CACHE",
            FLAG,
            "keep CLOSED BookKeeper ledgers' records between cycles (in the state store, by "
            "`<root>/INSTANCEID` and ledger id) and read again only what changed; `false` "
            "reads every ledger's znode every cycle",
        ),
    )
    bk_full_read_every: int = setting(
        7,
        SettingSpec(
            "LEDGERGC_BK_FULL_READ_EVERY",
            INTEGER,
            "with the record cache on, every ledger's znode is read again at least every "
            "this many cycles (a damaged cache heals); 1 reads all every cycle",
            minimum=1,
            unit="cycles",
        ),
    )
    bk_record_cache_keep_days: int = setting(
        30,
        SettingSpec(
            "LEDGERGC_BK_RECORD_CACHE_KEEP_DAYS",
            INTEGER,
            "the record cache's rows of a BookKeeper (or of an address of it) that no cycle "
            "used for this many days are dropped from the state store (another cluster's, "
            "a moved ensemble's)",
            minimum=1,
            unit="days",
        ),
    )
    zk_max_reads_per_second: float = setting(
        0.0,
        SettingSpec(
            "LEDGERGC_ZK_MAX_READS_PER_SECOND",
            NUMBER,
            "the most znodes a cycle reads from ZooKeeper per second, driver and Spark "
            "executors together (every read of a multi-read counts); 0: no bound",
            minimum=0,
            unit="reads/s",
            default_doc="0 (no bound)",
        ),
    )
    # The Pulsar cluster names (pulsarClusterName) whose offloaded segments are this
    # store's; empty: learned from the store's live segments (rules/orphans/segments.py).
    pulsar_clusters: tuple[str, ...] = setting(
        (),
        SettingSpec(
            "LEDGERGC_PULSAR_CLUSTER",
            NAMES,
            "this store's Pulsar cluster name(s), comma-separated (`us-east`; add "
            "`(untagged)` if nameless offloaded objects are ours too); only segments whose "
            "objects carry one of them (`pulsarClusterName`) may be deleted. Empty: learned "
            "from up to 16 live segments each cycle. Set it when the offload bucket is "
            "shared with another cluster",
            check=check_pulsar_clusters,
        ),
    )

    # A broker's broker.conf: the settings not set otherwise are read from it
    # (``with_broker_conf``). Never handed to a child process: it gets the values.
    pulsar_conf: Path | None = setting(
        None,
        SettingSpec(
            "LEDGERGC_PULSAR_CONF",
            PATH,
            "a Pulsar broker's `broker.conf`: every setting not set otherwise is read from it "
            "(`metadataStoreUrl`/`zookeeperServers`, `configurationMetadataStoreUrl`/"
            "`configurationStoreServers`/`globalZookeeperServers`, "
            "`bookkeeperMetadataServiceUri`, "
            "`managedLedgerOffloadDriver` with its bucket, region and endpoint, "
            "`clusterName`); `ledgergc status --json` shows where each value came from",
            inherited=False,
        ),
    )
    #: Where each value came from, by variable (``Origin``); not a setting. Kept out of
    #: comparisons: two settings with the same values are the same settings.
    origins: Mapping[str, Origin] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )
    #: Whose ZooKeeper sessions these settings open: Pulsar's (``PULSAR``), or
    #: BookKeeper's (``BOOKKEEPER``: made by ``bookkeeper_settings``), so that an error
    #: names the variable that set each TLS and SASL part on that ensemble. Not a setting.
    ensemble: str = dataclasses.field(default=PULSAR, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Convert and check every setting, so a bad one stops the run before it starts.

        Whoever made these settings (the environment, a broker.conf, a connection, the
        Airflow variable, a run's params, a test), each value goes through its field's
        spec: converted from text if given as text, bounds and form checked, normalized.
        Each error names the variable (and the broker.conf key it came from) and the fix
        (DESIGN.md: exit 2, one line). The origins are settled to the values kept: the
        spelling given is kept where the value's form changed (an address).
        """
        origins: dict[str, Origin] = {}
        for spec in declared(type(self)):
            raw = self._value_of(spec)
            origin = self.origins.get(spec.env)
            try:
                accepted = spec.accept(raw)
            except ConfigError as exc:
                if origin is None or origin.source in ("env", "code"):
                    raise
                raise ConfigError(f"{exc} (from {origin.describe()})") from exc
            object.__setattr__(self, spec.field, self._with_value(spec, accepted))
            settled = (origin or Origin("code")).settled(spec, raw, accepted)
            if settled is not None and (settled.source != "code" or settled.given):
                origins[spec.env] = settled
        # A plain dict (pickled to Spark executors with the settings); never changed.
        object.__setattr__(self, "origins", origins)
        self._check_ledgers_root()
        # What the parts of a composite setting must say together (a certificate needs its
        # key, a JAAS file its Client section): checked once every part is in place.
        self.zk_security.check(self.zk_setting_names())
        if not self.bk_zk_security.is_empty():
            self.bookkeeper_security.check(self._bookkeeper_names())
        if not self.config_store_security.is_empty():
            self.configuration_security.check(self.configuration_names())

    def _check_ledgers_root(self) -> None:
        """A ``zk+…://`` address's path *is* BookKeeper's ledgers root
        (``ZKMetadataDriverBase``): a ``LEDGERGC_BK_LEDGERS_ROOT`` that names another is a
        contradiction, and either way one of them points at a tree that is not this
        BookKeeper's (whose ledgers would look orphaned): refused, not resolved."""
        named = self.bookkeeper_address.ledgers_root
        if self.bk_ledgers_root is None or named is None or named == self.bk_ledgers_root:
            return
        address = self.bookkeeper_env
        raise ConfigError(
            f"LEDGERGC_BK_LEDGERS_ROOT={self.bk_ledgers_root!r} contradicts "
            f"{address}={self.given(address)!r}, whose path {named} is BookKeeper's "
            "ledgers root; unset LEDGERGC_BK_LEDGERS_ROOT or make the two agree"
        )

    def _bookkeeper_names(self) -> Names:
        return names_for(BOOKKEEPER_PREFIX, self.bk_zk_security, self.bookkeeper_env)

    def __getstate__(self) -> dict[str, Any]:
        """What a pickled copy carries (a Spark closure or broadcast, the one way
        settings reach an executor): the ZooKeeper TLS material as PEM text and a JAAS
        login as its username and password, never paths, which may not exist on the
        executor's host (``ZkSecurity.portable``)."""
        state = dict(self.__dict__)
        state["zk_security"] = self.zk_security.portable(self.zk_setting_names())
        if not self.bk_zk_security.is_empty():
            state["bk_zk_security"] = self.bookkeeper_security.portable(self._bookkeeper_names())
        if not self.config_store_security.is_empty():
            state["config_store_security"] = self.configuration_security.portable(
                self.configuration_names()
            )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy arrives (on a Spark executor, the one way settings reach one): its
        secrets are masked in that process's logs from now on, as its edge's are."""
        self.__dict__.update(state)
        from ledger_gc.config.secret_values import install_for

        install_for(self)

    def _value_of(self, spec: SettingSpec) -> Any:
        value = getattr(self, spec.field)
        return getattr(value, spec.part) if spec.part else value

    def _with_value(self, spec: SettingSpec, value: Any) -> Any:
        """The field's new value with ``value`` in the spec's place (its part, if any)."""
        if spec.part is None:
            return value
        return replace(getattr(self, spec.field), **{spec.part: value})

    def check_state_dir(self) -> Path:
        """Make sure the state dir exists and is writable, before anything runs
        (``endpoints.check_state_dir``)."""
        return check_state_dir(Path(self.state_dir))

    def given(self, env: str) -> str:
        """The value of ``env`` as it was written (an address in Pulsar's form), for errors
        and ``status``; the kept value where it was not written otherwise."""
        [spec] = [spec for spec in declared(type(self)) if spec.env == env]
        origin = self.origins.get(env)
        if origin is not None and origin.given is not None:
            return spec.shown(origin.given, self._value_of(spec))
        return spec.shown(spec.text_of(self._value_of(spec)), self._value_of(spec))

    @property
    def zk_hosts(self) -> str:
        """Pulsar's ZooKeeper as kazoo connects to it: ``h1:2181,h2:2181/chroot``."""
        return self.zk_address.hosts

    @property
    def bk_zk_hosts(self) -> str | None:
        """BookKeeper's own ensemble's connect string (None: Pulsar's)."""
        return None if self.bk_zk_address is None else self.bk_zk_address.hosts

    @property
    def zk_chroot(self) -> str:
        """The chroot part of ``zk_hosts`` ("" for none)."""
        return self.zk_address.chroot

    @property
    def block_store(self) -> bool:
        """Whether the S3 block source is on (``LEDGERGC_BUCKET`` set)."""
        return bool(self.bucket)

    @property
    def bookkeeper_address(self) -> ZkAddress:
        """Where BookKeeper's metadata lives: ``LEDGERGC_BK_ZK_HOSTS``, else Pulsar's
        (with the ledgers root and manager a ``zk+…://`` URL names)."""
        return self.bk_zk_address or self.zk_address

    @property
    def bookkeeper_hosts(self) -> str:
        """BookKeeper's ensemble and chroot as kazoo connects to them."""
        return self.bookkeeper_address.hosts

    @property
    def bookkeeper_security(self) -> ZkSecurity:
        """TLS and SASL of BookKeeper's ensemble: ``LEDGERGC_BK_ZK_*``, else Pulsar's."""
        return self.bk_zk_security.over(self.zk_security)

    @property
    def bookkeeper_env(self) -> str:
        """The variable that names BookKeeper's ensemble: its own, else Pulsar's."""
        return "LEDGERGC_BK_ZK_HOSTS" if self.bk_zk_address else "LEDGERGC_ZK_HOSTS"

    @property
    def bookkeeper_root(self) -> str:
        """BookKeeper's ledgers root below its chroot: ``LEDGERGC_BK_LEDGERS_ROOT``, else
        the path of a ``zk+…://`` address (BookKeeper's zkLedgersRootPath; the two never
        disagree), else ``/ledgers`` (also for ``metadata-store:``, as Pulsar's metadata
        driver reads it)."""
        return self.bk_ledgers_root or self.bookkeeper_address.ledgers_root or DEFAULT_LEDGERS_ROOT

    @property
    def bookkeeper_manager(self) -> str | None:
        """The ledger manager a ``zk+<manager>://`` address names (None: ``LAYOUT``
        decides); the scan refuses a ``LAYOUT`` that names another."""
        return self.bookkeeper_address.manager

    @property
    def configuration_address(self) -> ZkAddress:
        """Pulsar's configuration store: ``LEDGERGC_CONFIG_STORE_HOSTS`` (or broker.conf's
        ``configurationMetadataStoreUrl``), else the local store's address."""
        return self.config_store_address or self.zk_address

    @property
    def configuration_security(self) -> ZkSecurity:
        """TLS and SASL of the configuration store: ``LEDGERGC_CONFIG_STORE_*``, each
        unset part the local store's (``LEDGERGC_ZK_*``)."""
        return self.config_store_security.over(self.zk_security)

    @property
    def configuration_digest(self) -> str | None:
        """Digest auth on the configuration store: its own, else the local store's."""
        return self.config_store_digest or self.zk_digest

    @property
    def configuration_env(self) -> str:
        """The variable that names the configuration store: its own, else the local one."""
        return "LEDGERGC_CONFIG_STORE_HOSTS" if self.config_store_address else "LEDGERGC_ZK_HOSTS"

    @property
    def configuration_given(self) -> bool:
        """Whether a configuration store was given (the setting or broker.conf's keys),
        even one that is the local store's address."""
        return self.config_store_address is not None

    def configuration_names(self) -> Names:
        """The variable of each part of the configuration store's TLS and SASL, for its
        errors: its ``LEDGERGC_CONFIG_STORE_*`` where set, else the local store's."""
        return names_for(CONFIG_STORE_PREFIX, self.config_store_security, self.configuration_env)

    def bookkeeper_settings(self) -> Settings:
        """These settings pointed at BookKeeper's ensemble and chroot (its sessions),
        with its TLS and SASL; their errors name BookKeeper's variables."""
        if self.ensemble == BOOKKEEPER:
            return self
        return replace(
            self,
            zk_address=self.bookkeeper_address,
            zk_security=self.bookkeeper_security,
            ensemble=BOOKKEEPER,
        )

    def zk_setting_names(self) -> Names:
        """The variable that sets each part of ``zk_security``, for error messages:
        Pulsar's ``LEDGERGC_ZK_*``, or on BookKeeper's sessions (``bookkeeper_settings``)
        its ``LEDGERGC_BK_ZK_*`` where set, else the Pulsar one it falls back to."""
        return self._bookkeeper_names() if self.ensemble == BOOKKEEPER else PULSAR_NAMES

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
        """The variables that ``from_env`` turns back into these settings: how a child
        process (spark-submit, ``airflow dags test``) gets the same run's.

        Every declared setting, the ``LEDGERGC_*`` ones and boto3's credential variables
        (those only when set: an empty one would hide boto3's default chain)."""
        env: dict[str, str] = {}
        for spec in declared(type(self)):
            if not spec.inherited:
                continue
            text = spec.to_text(self._value_of(spec))
            if text is not None:
                env[spec.env] = text
        return env

    @classmethod
    def withheld_variables(cls) -> frozenset[str]:
        """The variables a child process must not inherit from its parent's environment
        when ``to_env`` leaves them out: every secret setting (a key a SAS replaced, keys
        no store uses), every setting never handed on (a key file, broker.conf's path),
        and the AWS key id that goes with its secret (boto3 refuses an id alone). Others
        (a region) may stand as the parent has them."""
        names = {spec.env for spec in declared(cls) if spec.secret or not spec.inherited}
        return frozenset(names | {"AWS_ACCESS_KEY_ID"})

    def secrets(self) -> list[str]:
        """The secret parts of these settings' values (a password, a key, a token), for
        a log masker: every setting declared secret, nothing else."""
        found = (spec.secret_of(self._value_of(spec)) for spec in declared(type(self)))
        return [secret for secret in found if secret]

    def secret_settings(self) -> list[str]:
        """The variables whose values hold a secret here (``secrets``' settings), for an
        error that must name them without showing them."""
        return [spec.env for spec in declared(type(self)) if spec.secret_of(self._value_of(spec))]

    def with_values(
        self, values: Mapping[str, Any], *, source: str, kind: str = "variable"
    ) -> Settings:
        """A copy with the settings ``values`` names by key (``grace_seconds``,
        ``trim_retention_seconds``: the variable's name, lower-case, without
        ``LEDGERGC_``, or the field's name), as the ``ledgergc_settings`` variable or a
        run's params give them.

        Values come as JSON has them: a number may be quoted, a flag may be ``"true"``;
        each is converted and checked by its spec like the environment's. None and ""
        leave a setting as it is. An unknown key, or a bad value, is one ``ConfigError``
        naming ``source``, the key and the variable.
        """
        specs = {key: spec for spec in declared(type(self)) for key in spec.keys}
        # Every value first, then one new Settings: the parts of a composite setting (a
        # certificate and its key) are checked together, as the environment's are.
        changed: dict[str, Any] = {}
        origins = dict(self.origins)
        for key, value in values.items():
            if value is None or value == "":
                continue
            spec = specs.get(key)
            if spec is None:
                raise ConfigError(
                    f"{source}: {key!r} is not a setting; keys are the LEDGERGC_* names in "
                    "lower case without the prefix, e.g. grace_seconds or delete_enabled"
                )
            accepted = spec.accept(value, source=source)
            origins[spec.env] = Origin(kind, f"{key} in {source}", _given(value))
            if spec.part is None:
                changed[spec.field] = accepted
            else:
                whole = changed.get(spec.field, getattr(self, spec.field))
                changed[spec.field] = replace(whole, **{spec.part: accepted})
        return replace(self, **changed, origins=origins) if changed else self

    def overridden_by(self, source: str, detail: str, changes: Mapping[str, Any]) -> Settings:
        """A copy with ``changes`` (fields by name) made by ``source`` (``connection``
        ``detail``), so that ``status`` can say where each value came from."""
        changes = {field: value for field, value in changes.items() if value is not None}
        if not changes:
            return self
        origins = dict(self.origins)
        for spec in declared(type(self)):
            if spec.field in changes and spec.part is None:
                origins[spec.env] = Origin(source, detail, _given(changes[spec.field]))
        return replace(self, **changes, origins=origins)

    def without_values(self, *fields: str) -> Settings:
        """A copy with the settings ``fields`` names unset (None, their origins gone): what
        a child process must not be handed (an Azure account key once a SAS replaces it)."""
        gone = {spec.env for spec in declared(type(self)) if spec.field in fields}
        origins = {env: origin for env, origin in self.origins.items() if env not in gone}
        unset: dict[str, Any] = dict.fromkeys(fields)
        return replace(self, **unset, origins=origins)

    def source_of(self, env: str) -> str:
        """``default`` when ``env``'s value is its default and nobody set it; else who set
        it (``env``, ``broker.conf``, ``connection``, ``variable``, ``params``, ``code``)."""
        origin = self.origins.get(env)
        if origin is not None:
            return origin.source
        [spec] = [spec for spec in declared(type(self)) if spec.env == env]
        value, default = self._value_of(spec), default_of(type(self), spec)
        return "default" if spec.text_of(value) == spec.text_of(default) else "code"

    def with_broker_conf(self) -> Settings:
        """These settings with every one still at its default read from the broker.conf
        that ``LEDGERGC_PULSAR_CONF`` names (``ledger_gc.config.broker_conf``): an explicit
        value (environment, connection, variable, params, a caller's) wins."""
        if self.pulsar_conf is None:
            return self
        path = self.pulsar_conf
        specs = {spec.env: spec for spec in declared(type(self)) if spec.part is None}
        changes: dict[str, Any] = {}
        origins = dict(self.origins)
        conf = broker_conf.read_broker_conf(path)
        other_store = self._other_store(conf, path)
        if other_store:
            origins[DRIVER_ENV] = other_store
            # What an earlier reading of the file put there (a task reads it with the
            # environment, then again after the variable and params set the driver).
            for env in broker_conf.STORE_SETTINGS:
                if self.source_of(env) == "broker.conf":
                    changes[specs[env].field] = default_of(type(self), specs[env])
                    origins.pop(env, None)
        for found in conf:
            spec = specs[found.env]
            if self.source_of(found.env) != "default":
                continue
            if other_store and found.env in broker_conf.STORE_SETTINGS:
                continue
            detail = f"{found.key} in {path}" + (f": {found.why}" if found.why else "")
            changes[spec.field] = found.value
            origins[found.env] = Origin("broker.conf", detail, found.value)
        return replace(self, **changes, origins=origins) if changes else self

    def _other_store(self, conf: list[broker_conf.ConfValue], path: Path) -> Origin | None:
        """The driver's origin, saying so, when it was set (not by the file) to another
        family of store than the file's ``managedLedgerOffloadDriver``: the file's bucket,
        region, endpoint and key file are that other store's, and are not read into this
        one (an S3 client sent to a GCS endpoint, a GCS bucket listed on S3). None: the
        file's store is this one (or names none)."""
        driver = next((found for found in conf if found.env == DRIVER_ENV), None)
        if driver is None or self.source_of(DRIVER_ENV) == "default":
            return None
        if offload_family(driver.value) == offload_family(self.offload_driver):
            return None
        origin = self.origins.get(DRIVER_ENV) or Origin("code")
        return replace(
            origin,
            detail=(
                f"{origin.describe()}, over {driver.key}={driver.value} in {path}: that "
                "file's offload bucket, region, endpoint and key file are another store's "
                "and are not read"
            ),
        )

    def provenance(self) -> dict[str, dict[str, Any]]:
        """Each setting's value (as given, secrets masked) and where it came from: what
        ``ledgergc status --json`` shows under ``settings``."""
        shown: dict[str, dict[str, Any]] = {}
        for spec in declared(type(self)):
            value = self._value_of(spec)
            entry: dict[str, Any] = {
                "value": self.given(spec.env),
                "source": self.source_of(spec.env),
            }
            kept = spec.shown(spec.text_of(value), value)
            if kept != entry["value"]:
                entry["normalized"] = kept
            origin = self.origins.get(spec.env)
            if origin is not None and origin.detail:
                entry["from"] = origin.detail
            shown[spec.env] = entry
        root = shown["LEDGERGC_BK_LEDGERS_ROOT"]
        if self.bk_ledgers_root is None:
            root["value"] = self.bookkeeper_root
            if self.bookkeeper_address.ledgers_root:
                root.update(source="address", **{"from": f"the path of {self.bookkeeper_env}"})
        return shown

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from the declared variables (``LEDGERGC_*``, names fixed by
        DESIGN.md, and boto3's credentials); an unset or empty variable keeps its default
        (except where empty is a value: ``LEDGERGC_BUCKET``, ``LEDGERGC_PREFIX``).

        A variable set empty is still set: its default is the operator's explicit choice
        (``LEDGERGC_OFFLOAD_BUCKET=``: tiered storage off; ``LEDGERGC_BK_ZK_HOSTS=``:
        BookKeeper in Pulsar's store), and a broker.conf does not fill it."""
        env = os.environ if environ is None else environ
        settings = cls()
        changes: dict[str, Any] = {}
        origins: dict[str, Origin] = {}
        for spec in declared(cls):
            found, value = spec.read_env(env)
            if not found and env.get(spec.env) == "":
                origins[spec.env] = Origin("env")
            if found:
                named = spec.env if env.get(spec.env) else spec.fallback_env
                named = named or spec.env
                origins[spec.env] = Origin("env", "" if named == spec.env else named, env[named])
                changes[spec.field] = (
                    value
                    if spec.part is None
                    else replace(
                        changes.get(spec.field, getattr(settings, spec.field)), **{spec.part: value}
                    )
                )
        return replace(settings, **changes, origins=origins).with_broker_conf()


def _given(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_retention_overrides(raw: str | Mapping[str, Any] | None) -> dict[str, TrimRetention]:
    """Parse ``{"tenant/ns": {"seconds": 3600, "bytes": -1}, ...}`` (JSON or a mapping,
    whose values may already be ``TrimRetention``)."""
    if raw is None:
        return {}
    try:
        data = json.loads(raw) if isinstance(raw, str) else dict(raw)
        result = {}
        for namespace, value in data.items():
            if namespace.count("/") != 1:
                raise ValueError(f"namespace {namespace!r} is not tenant/namespace")
            result[namespace] = (
                value
                if isinstance(value, TrimRetention)
                else TrimRetention(
                    seconds=int(value.get("seconds", 0)), bytes=int(value.get("bytes", 0))
                )
            )
        return result
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"LEDGERGC_TRIM_RETENTION_OVERRIDES is not valid: {exc}; expected JSON like "
            '{"tenant/ns": {"seconds": 3600, "bytes": -1}}'
        ) from exc


def check_overrides(name: str, overrides: Mapping[str, TrimRetention]) -> None:
    """Each namespace's retention is -1 (keep forever), 0 or more."""
    for namespace, retention in overrides.items():
        for unit, value in (("SECONDS", retention.seconds), ("BYTES", retention.bytes)):
            if value < -1:
                raise ConfigError(
                    f"{name}[{namespace}]_{unit}={value} must be -1 (keep forever), 0 (none) "
                    "or more"
                )


def _checked_state_url(url: str) -> str:
    # Imported here: ledger_gc.state's package imports the store (SQLAlchemy), which the
    # pure rule modules that import settings must not pull in.
    from ledger_gc.state.url import check_state_url

    return check_state_url(url)
