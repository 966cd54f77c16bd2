"""The edge: ``Settings`` resolved into ``Endpoints``, once per command or task.

A CLI command (``ledger_gc/commands``) and an Airflow task (``ledger_gc/airflow``) call
``resolve``; what they call below receives the endpoints (``config/endpoints.py``), never
the settings. This is the one module that reads the settings for them: which ensemble
BookKeeper's metadata is on, with which TLS and SASL parts (``LEDGERGC_BK_ZK_*``, each
unset part Pulsar's), which variable each error names.
"""

from __future__ import annotations

from ledger_gc.config.endpoints import (
    BOOKKEEPER,
    BookKeeperEndpoint,
    Endpoints,
    ZkEndpoint,
)
from ledger_gc.config.settings import Settings
from ledger_gc.config.zk_addresses import ZkAddress
from ledger_gc.config.zk_security import PARTS, Names, ZkSecurity


def resolve(settings: Settings) -> Endpoints:
    """The endpoints of ``settings``: called by a CLI command and an Airflow task, once."""
    return Endpoints(
        zk_endpoint(settings),
        bookkeeper_endpoint(settings),
        settings.bookkeeper,
    )


def _variables(names: Names) -> tuple[tuple[str, str], ...]:
    return tuple((part, names(part)) for part in PARTS)


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
    bk = settings.bookkeeper_settings()
    zk = _endpoint(
        settings,
        settings.bookkeeper_address,
        settings.bookkeeper_security,
        BOOKKEEPER,
        bk.zk_setting_names(),
        settings.bookkeeper_env,
    )
    env = settings.bookkeeper_env
    return BookKeeperEndpoint(
        zk,
        settings.bookkeeper_root,
        settings.bookkeeper_manager,
        f"{env}={settings.given(env)!r}",
    )


def _endpoint(
    settings: Settings,
    address: ZkAddress,
    security: ZkSecurity,
    ensemble: str,
    names: Names,
    hosts_variable: str,
) -> ZkEndpoint:
    return ZkEndpoint(
        address,
        security,
        settings.zk_digest,
        settings.zk_timeout_seconds,
        settings.zk_max_reads_per_second,
        settings.zk_max_record_bytes,
        ensemble,
        _variables(names),
        hosts_variable,
    )
