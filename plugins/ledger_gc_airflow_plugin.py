"""The Airflow plugin of ledger-gc: the "Ledger GC" page, its JSON and its metrics.

Airflow 3 serves plugin pages from FastAPI apps (``fastapi_apps``) and links them into
its navigation as external views (``external_views``; the UI shows the page in a frame
under ``/plugin/ledger-gc``). Airflow does not protect plugin apps: every endpoint here
asks Airflow's own ``get_user`` (the JWT in the ``Authorization: Bearer`` header or the
UI's ``_token`` cookie, checked by the configured auth manager) and refuses anyone not
signed in; the page sends them to the login page instead.

This module stays thin: the figures come from ``ledger_gc.observability`` (no Airflow
there). A view reads the state store and, at most every 30 s, the live metadata; the work
runs in a thread, off the event loop. Airflow loads plugin modules in every component
(scheduler, workers...), so Airflow's API-server internals are imported only when a
request arrives.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPBearer

from ledger_gc.config.settings import Settings
from ledger_gc.observability.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ledger_gc.observability.overview import build_overview
from ledger_gc.observability.state_reads import AuditTally

URL_PREFIX = "/ledger-gc"
URL_ROUTE = "ledger-gc"
PAGE_REFRESH_SECONDS = 60
# Settings and the live ZooKeeper status are re-read at most this often.
CACHE_SECONDS = 30.0

_bearer = HTTPBearer(auto_error=False)

_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" '
    'stroke="#4c78a8" stroke-width="2" stroke-linecap="round" stroke-linejoin="round">'
    '<path d="M3 6h18M8 6V4h8v2M6 6l1 14h10l1-14M10 10v6M14 10v6"/></svg>'
)


async def signed_in_user(request: Request) -> Any:
    """The signed-in Airflow user, or HTTP 401/403: Airflow's own check, reused as is."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, await _bearer(request))


def settings_in_api_server() -> Settings:
    """The settings the DAG tasks use, assembled as theirs are
    (``settings_hook.assemble_settings``: the environment, both connections with the
    ZooKeeper one's TLS and SASL, the variable, a broker.conf), read the API server's way.

    ``LedgerGcHook`` asks the Task SDK, which outside a running task sees neither the
    metadata DB's connections nor its variables; here the core models read them
    (environment, secrets backends, then the DB). The S3 connection's identity is not
    resolved (no role is assumed for a page that reads no bucket). Their secrets are
    masked in the API server's logs from then on, as a task's are (``masked``).
    """
    from ledger_gc.airflow.settings_hook import assemble_settings, masked

    return masked(
        assemble_settings(_connection_in_api_server, _variable_in_api_server, s3_credentials=False)
    )


def _connection_in_api_server(conn_id: str) -> Any | None:
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models import Connection

    try:
        return Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        return None  # not defined: the environment's settings stand, as for the tasks


def _variable_in_api_server() -> dict[str, Any]:
    from airflow.models import Variable

    from ledger_gc.airflow.settings_hook import SETTINGS_VARIABLE

    raw = Variable.get(SETTINGS_VARIABLE, default_var=None)
    if not raw:
        return {}
    return dict(json.loads(raw) if isinstance(raw, str) else raw)


class _Sources:
    """Settings, the audit tally and the live-status cache, shared by all requests.

    Settings are re-read at most every ``ttl`` seconds, so a changed connection or
    variable shows without a restart and a page view costs no database query.
    """

    def __init__(self, ttl: float = CACHE_SECONDS) -> None:
        self._ttl = ttl
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget cached settings, tallies and status (a changed configuration, tests)."""
        with self._lock:
            self._settings: tuple[float, Settings] | None = None
            self._tallies: dict[str, AuditTally] = {}
            self._live: Any = None

    def live(self) -> Any:
        """The live-status cache, made on first use: kazoo and boto3 are imported only by
        the API server, not by every Airflow component that loads plugins."""
        with self._lock:
            if self._live is None:
                from ledger_gc.observability.live import LiveStatusCache

                self._live = LiveStatusCache(self.settings, ttl=self._ttl)
            return self._live

    def settings(self) -> Settings:
        with self._lock:
            now = time.monotonic()
            if self._settings is None or now - self._settings[0] >= self._ttl:
                self._settings = (now, settings_in_api_server())
            return self._settings[1]

    def tally(self, settings: Settings) -> AuditTally:
        """The tally of the settings' state store (one per store, kept across views)."""
        key = f"{settings.state_url or ''}|{settings.state_dir}"
        with self._lock:
            return self._tallies.setdefault(key, AuditTally(settings))

    def overview(self, *, live: bool = True) -> dict[str, Any]:
        """The overview (blocking: the state store, maybe ZooKeeper; call it in a thread)."""
        settings = self.settings()
        current = self.live().get() if live else None
        return build_overview(
            settings,
            live_status=current.status if current else None,
            live_error=current.error if current else None,
            totals=self.tally(settings).refresh(),
        )

    def registered(self) -> dict[str, Any]:
        """Every registered orphan with its schedule (blocking: the state store)."""
        from ledger_gc.observability.registered import registered_orphans

        return registered_orphans(self.settings())


sources = _Sources()


def create_app(source: _Sources | None = None) -> FastAPI:
    """The plugin's FastAPI app (``source`` lets tests pass their own)."""
    source = source or sources
    app = FastAPI(
        title="ledger-gc",
        description="The Ledger GC page, its overview as JSON and Prometheus metrics.",
    )
    app.state.sources = source
    user = [Depends(signed_in_user)]

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page(request: Request) -> Response:
        try:
            await signed_in_user(request)
        except HTTPException as exc:
            if exc.status_code != status.HTTP_401_UNAUTHORIZED:
                raise
            return _login_redirect(request)
        from ledger_gc.observability.page import render_page

        overview = await run_in_threadpool(source.overview)
        registered = await run_in_threadpool(source.registered)
        return HTMLResponse(
            render_page(overview, registered=registered, refresh_seconds=PAGE_REFRESH_SECONDS),
            headers={"Cache-Control": "no-store"},
        )

    @app.get("/api/overview", dependencies=user)
    async def overview(live: bool = True) -> JSONResponse:
        """The overview: orphans per phase and trend, trim backlog, deletions, last runs.
        ``live=false`` skips the ZooKeeper read (the backlog of the last trim run)."""
        data = await run_in_threadpool(source.overview, live=live)
        return JSONResponse(data, headers={"Cache-Control": "no-store"})

    @app.get("/api/orphans", dependencies=user)
    async def orphans() -> JSONResponse:
        """Every registered orphan: when it can be deleted and what it still waits for
        (the same as ``ledgergc orphans --list --json``)."""
        data = await run_in_threadpool(source.registered)
        return JSONResponse(data, headers={"Cache-Control": "no-store"})

    @app.get("/metrics", dependencies=user)
    async def metrics() -> Response:
        """Prometheus text; scrape it with an Airflow JWT as a bearer token."""
        from ledger_gc.observability.metrics import render_metrics

        data = await run_in_threadpool(source.overview)
        return Response(render_metrics(data), media_type=METRICS_CONTENT_TYPE)

    @app.get("/icon.svg", include_in_schema=False)
    async def icon() -> Response:
        # The navigation shows it before any page is opened; it holds no data.
        return Response(_ICON, media_type="image/svg+xml")

    return app


def _login_redirect(request: Request) -> RedirectResponse:
    """To the auth manager's login page, coming back here once signed in."""
    from airflow.api_fastapi.app import get_auth_manager

    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(
        get_auth_manager().get_url_login(next_url=target),
        status_code=status.HTTP_303_SEE_OTHER,
    )


class LedgerGcPlugin(AirflowPlugin):
    """Registers the app under ``/ledger-gc`` and a "Ledger GC" entry in the navigation."""

    name = "ledger_gc"
    fastapi_apps = [  # noqa: RUF012 - Airflow's plugin API is class attributes
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "Ledger GC"}
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Ledger GC",
            # Relative: resolved against the UI's base URL, so a path prefix still works.
            "href": f"{URL_ROUTE}/",
            "url_route": URL_ROUTE,
            "destination": "nav",
            "nav_top_level": True,
            "icon": f"{URL_ROUTE}/icon.svg",
        }
    ]
