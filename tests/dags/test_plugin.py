"""The Airflow plugin inside Airflow 3.3's real API server app: its page, JSON and metrics
refuse anyone not signed in, and show a signed-in user the overview of the state dir.

Airflow does not protect plugin apps on its own, so these tests are what proves the
plugin does. They build the API server's FastAPI app (``create_app``) with the
SimpleAuthManager, a known user and password, and sign in through ``/auth/token``
exactly as the login page and the REST API clients do.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger_gc import run_log
from ledger_gc.audit import AuditLog, AuditRecord
from ledger_gc.formats.markers import encode_marker_value, marker_key
from ledger_gc.formats.records import encode_managed_ledger_info, set_property
from ledger_gc.observability.overview import build_overview
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.metadata import paths

USER, PASSWORD = "gc-viewer", "not-a-real-secret"
T0 = 1_700_000_000_000
STUCK = "pulsar-admin namespaces delete --force acme/stuck"


@pytest.fixture(scope="module")
def api(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A test client of Airflow's API server app, with the plugin mounted."""
    from fastapi.testclient import TestClient

    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    with pytest.MonkeyPatch.context() as mp:
        # Airflow reads AIRFLOW__* variables whenever a value is looked up.
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", f"{USER}:viewer")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
        from airflow.api_fastapi.app import create_app

        with TestClient(create_app()) as client:
            yield client


@pytest.fixture
def plugin_sources(api: Any) -> Iterator[Any]:
    """The mounted plugin app's shared sources, reset before and after the test.

    Taken from the app that Airflow mounted, not from an import: Airflow loads the plugin
    file itself, and may have done so more than once in this process.
    """
    from starlette.routing import Mount

    [mount] = [r for r in api.app.routes if isinstance(r, Mount) and r.path == "/ledger-gc"]
    sources = mount.app.state.sources
    sources.reset()
    yield sources
    sources.reset()


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin_sources: Any) -> Path:
    """A state dir with one orphan cycle, one trim run and one deletion, as the plugin's."""
    state = tmp_path / "state"
    run_log.append_run(
        state,
        run_log.ORPHANS,
        {
            "run_id": "orphans-1",
            "status": "ok",
            "finished_ms": T0,
            "phases": {
                "registered": {
                    "count": 2,
                    "bytes": 300,
                    "by_class": {
                        "orphan-partition": {"count": 1, "bytes": 200},
                        "orphan-ledger": {"count": 1, "bytes": 100},
                    },
                }
            },
            # The Pulsar-metadata survey's part (PulsarMetadataManifest.to_manifest()).
            "pulsar_metadata": {
                "local_hosts": "zk1:2181/pulsar",
                "config_hosts": "zk1:2181/pulsar",
                "local_znodes": 50,
                "classes": {"pm-stuck-delete": {"config": {"leftovers": 1, "znodes": 1}}},
                "samples": {"pm-stuck-delete": [{"name": "acme/stuck", "command": STUCK}]},
            },
        },
    )
    run_log.append_run(
        state,
        run_log.TRIM,
        {"run_id": "trim-1", "outcome": "ok", "finished_at": T0, "totals": {"bytes_reclaimed": 9}},
    )
    AuditLog(state).append(
        [AuditRecord("trim", "ledger", "a/b/persistent/c", 1, "p/", 1, 9, "consumed", "trim-1")]
    )
    register_two_orphans(state)
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(state))
    # Nothing listens there: the live read fails at once and the page says so.
    monkeypatch.setenv("LEDGERGC_ZK_HOSTS", "127.0.0.1:1")
    monkeypatch.setenv("LEDGERGC_ZK_TIMEOUT_SECONDS", "1")
    return state


def register_two_orphans(state: Path) -> None:
    """Two registered orphans, seen by the runs ``scheduled__1`` and ``cli-2``."""
    from ledger_gc.orphans.registry import OrphanRegistry
    from ledger_gc.rules.orphans.phases import RegistryEntry

    with OrphanRegistry(state).transaction() as registry:
        for number, run_id in ((1, "scheduled__1"), (2, "cli-2")):
            instant = {"host_ms": T0 + number, "zk_ms": T0 + number, "s3_ms": T0 + number}
            assert registry.record_scan(run_id, T0, {"instant": instant}) == number
        for name, ledger, size, first in (("a", 7, 100, 1), ("b", 9, 5000, 2)):
            ml = f"acme/prod/persistent/{name}"
            registry.upsert(
                RegistryEntry(
                    prefix=f"ledgers/{ml}/ledgers/{ledger:020d}/",
                    target_class="orphan-ledger",
                    ml_name=ml,
                    ledger_id=ledger,
                    first_seen_ms=T0,
                    last_seen_ms=T0,
                    first_scan=first,
                    last_scan=2,
                    scans_seen=3 - first,
                    objects=1,
                    bytes=size,
                    newest_ms=T0 - 1000,
                )
            )


def sign_in(api: Any) -> str:
    response = api.post("/auth/token", json={"username": USER, "password": PASSWORD})
    assert response.status_code == 201, response.text
    return str(response.json()["access_token"])


ENDPOINTS = ["/ledger-gc/api/overview", "/ledger-gc/api/orphans", "/ledger-gc/metrics"]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_anonymous_requests_to_json_and_metrics_are_refused(api, state_dir, path):
    response = api.get(path)

    assert response.status_code == 401
    assert response.json() == {"detail": "Not authenticated"}


def test_anonymous_page_view_is_sent_to_the_login_page_and_shows_nothing(api, state_dir):
    response = api.get("/ledger-gc/", follow_redirects=False)

    assert response.status_code == 303
    assert response.headers["location"] == "/auth/login?next=%2Fledger-gc%2F"
    assert "orphans-1" not in response.text


@pytest.mark.parametrize("path", [*ENDPOINTS, "/ledger-gc/"])
def test_forged_and_expired_tokens_are_refused(api, state_dir, path):
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    user = SimpleAuthManagerUser(username=USER, role="viewer")
    expired = get_auth_manager().generate_jwt(user, expiration_time_in_seconds=-3600)
    genuine = sign_in(api)
    forged = genuine[:-4] + ("AAAA" if not genuine.endswith("AAAA") else "BBBB")

    for token, status in ((forged, 403), (expired, 401), ("not-a-jwt", 403)):
        if path.endswith("/") and status == 401:
            status = 303  # the page sends the browser to the login page instead
        for how in (
            {"headers": {"Authorization": f"Bearer {token}"}},
            {"cookies": {"_token": token}},
        ):
            response = api.get(path, follow_redirects=False, **how)
            assert response.status_code == status, (how, response.text)
            assert "orphans-1" not in response.text


def test_a_signed_in_user_gets_the_overview_as_json(api, state_dir):
    token = sign_in(api)

    response = api.get("/ledger-gc/api/overview", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    data = response.json()
    expected = build_overview(state_dir, live_error="(ignored)")
    for key in ("orphans", "deletions", "last_success"):
        assert data[key] == expected[key]
    backlog = data["trim"]["backlog"]
    assert backlog["source"] == "last_run"
    assert "127.0.0.1:1" in backlog["live_error"]  # ZooKeeper down: said on the page
    assert data["orphans"]["phase_totals"]["registered"] == {"count": 2, "bytes": 300}


def test_a_signed_in_user_gets_metrics_and_the_page_with_the_ui_cookie(api, state_dir):
    cookies = {"_token": sign_in(api)}  # what the Airflow UI's login page sets

    metrics = api.get("/ledger-gc/metrics", cookies=cookies)
    page = api.get("/ledger-gc/", cookies=cookies)

    assert metrics.status_code == 200
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert 'OrphanLogPartitionCount{namespace="",phase="registered"} 1' in metrics.text.splitlines()
    assert 'ledgergc_reclaimed_bytes_total{operation="trim"} 9' in metrics.text.splitlines()
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "<h1>Ledger GC</h1>" in page.text and "orphans-1" in page.text
    # Pulsar's own metadata: the local store's znodes and a stuck delete's command.
    assert 'ledgergc_pulsar_metadata_local_znodes{when="before"} 50' in metrics.text.splitlines()
    assert 'id="pulsar-metadata"' in page.text and f"<code>{STUCK}</code>" in page.text


@pytest.fixture
def airflow_configured(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test's store and state dir in the metadata DB, as an operator configures them:
    the ``ledgergc_zookeeper`` connection and the ``ledgergc_settings`` variable. The
    environment points elsewhere, so only a plugin that reads the DB finds them."""
    from airflow.models import Connection, Variable
    from airflow.utils.session import create_session

    hosts, _, chroot = settings.zk_hosts.partition("/")
    with create_session() as session:
        session.add(
            Connection(
                conn_id="ledgergc_zookeeper",
                conn_type="generic",
                host=hosts,
                extra=json.dumps({"chroot": chroot}),
            )
        )
    Variable.set("ledgergc_settings", json.dumps({"state_dir": str(settings.state_dir)}))
    monkeypatch.setenv("LEDGERGC_ZK_HOSTS", "127.0.0.1:1")
    monkeypatch.setenv("LEDGERGC_STATE_DIR", "/nonexistent")
    try:
        yield
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == "ledgergc_zookeeper").delete()
        Variable.delete("ledgergc_settings")


def test_the_live_backlog_comes_from_the_configured_zookeeper_and_is_cached(
    api, settings, zk_client, airflow_configured, plugin_sources
):
    info = ManagedLedgerInfo()
    set_property(
        info,
        marker_key(5),
        encode_marker_value(size=77, entries=1, timestamp=T0, marked_at=T0),
    )
    zk_client.create(
        paths.managed_ledger_path("acme/prod/persistent/t"),
        encode_managed_ledger_info(info),
        makepath=True,
    )
    headers = {"Authorization": f"Bearer {sign_in(api)}"}

    first = api.get("/ledger-gc/api/overview", headers=headers).json()
    zk_client.delete(paths.managed_ledger_path("acme/prod/persistent/t"))
    cached = api.get("/ledger-gc/api/overview", headers=headers).json()["trim"]["backlog"]
    skipped = api.get("/ledger-gc/api/overview?live=false", headers=headers).json()

    backlog = first["trim"]["backlog"]
    assert first["state_dir"] == str(settings.state_dir)
    assert (backlog["source"], backlog["pending_markers"], backlog["pending_bytes"]) == (
        "live",
        1,
        77,
    )
    assert backlog["oldest_marked_at_ms"] == T0
    # Within the cache's 30 s, the deleted managed ledger is still shown: no ZooKeeper
    # session per page view.
    assert cached == {**backlog, "oldest_age_seconds": cached["oldest_age_seconds"]}
    assert skipped["trim"]["backlog"]["source"] == "none"


def test_the_registered_orphans_are_listed_as_ledgergc_orphans_list_says(api, state_dir):
    from ledger_gc.config.settings import Settings
    from ledger_gc.observability.registered import registered_orphans

    cookies = {"_token": sign_in(api)}

    listing = api.get("/ledger-gc/api/orphans", cookies=cookies).json()
    page = api.get("/ledger-gc/", cookies=cookies).text

    expected = registered_orphans(Settings.from_env(), now_ms=listing["generated_at_ms"])
    assert listing == expected
    assert [o["ledger_id"] for o in listing["orphans"]] == [7, 9]
    assert listing["orphans"][0]["first_run_id"] == "scheduled__1"
    assert listing["orphans"][0]["waiting_for"] == ["deletion disabled"]
    assert 'id="registered-orphans"' in page
    for item in listing["orphans"]:
        assert f'data-prefix="{item["prefix"]}"' in page
    # Airflow's DAG run page for a DAG run; a command-line run has none.
    assert 'href="../dags/orphan_removal/runs/scheduled__1" target="_top"' in page
    assert "runs/cli-2" not in page


def test_the_plugin_adds_a_nav_entry_and_mounts_its_app(api):
    from starlette.routing import Mount

    headers = {"Authorization": f"Bearer {sign_in(api)}"}
    plugins = api.get("/api/v2/plugins", headers=headers).json()["plugins"]
    [plugin] = [p for p in plugins if p["name"] == "ledger_gc"]
    [view] = plugin["external_views"]
    mounts = [r.path for r in api.app.routes if isinstance(r, Mount)]

    assert view["url_route"] == "ledger-gc" and view["destination"] == "nav"
    assert not view["href"].startswith("/")  # relative to the UI's base URL
    assert plugin["fastapi_apps"] == [
        {"app": "fastapi.applications.FastAPI", "url_prefix": "/ledger-gc", "name": "Ledger GC"}
    ]
    assert "/ledger-gc" in mounts
    # Loaded once, from the plugins folder: no plugin import error at all. And the library
    # beside it is not executed a second time as top-level modules named "cli",
    # "settings"... (Airflow imports every .py file there; plugins/.airflowignore).
    errors = api.get("/api/v2/plugins/importErrors", headers=headers).json()
    assert errors["import_errors"] == [], errors
    library = str(Path(run_log.__file__).parent)
    strays = [
        name
        for name, module in list(sys.modules.items())
        if (getattr(module, "__file__", None) or "").startswith(library)
        and not name.startswith("ledger_gc")
    ]
    assert strays == []
    assert api.get("/ledger-gc/icon.svg").status_code == 200  # no data; the nav shows it


def test_the_page_reads_the_settings_the_tasks_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's settings are assembled as the tasks' are (``LedgerGcHook``), with the
    API server's own readers of connections and variables: the ZooKeeper connection's TLS
    and SASL extras (its login the SASL login), and a broker.conf the variable names
    (review 28, finding 7: the page dropped both, and read a secured ensemble as plain)."""
    from ledger_gc_airflow_plugin import settings_in_api_server

    conf = tmp_path / "broker.conf"
    conf.write_text(
        "clusterName=us-east\n"
        "managedLedgerOffloadDriver=aws-s3\n"
        "s3ManagedLedgerOffloadBucket=pulsar-offload\n",
        encoding="utf-8",
    )
    connection = {
        "conn_type": "generic",
        "host": "zk1:2281/pulsar",
        "login": "bookkeeper",
        "password": "bk-secret",
        "extra": {"zk_tls": True, "zk_sasl_mechanism": "DIGEST-MD5"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LEDGERGC_ZOOKEEPER", json.dumps(connection))
    variable = {"pulsar_conf": str(conf), "state_dir": str(tmp_path / "state")}
    monkeypatch.setenv("AIRFLOW_VAR_LEDGERGC_SETTINGS", json.dumps(variable))
    monkeypatch.delenv("LEDGERGC_ZK_HOSTS", raising=False)

    settings = settings_in_api_server()

    assert settings.zk_hosts == "zk1:2281/pulsar"
    security = settings.zk_security
    assert (security.tls, security.sasl_mechanism) == (True, "DIGEST-MD5")
    assert (security.sasl_username, security.sasl_password) == ("bookkeeper", "bk-secret")
    assert settings.zk_digest is None
    assert (settings.offload_bucket, settings.pulsar_clusters) == ("pulsar-offload", ("us-east",))
    assert settings.provenance()["LEDGERGC_OFFLOAD_BUCKET"]["source"] == "broker.conf"
