"""Just enough of the Chrome DevTools Protocol to drive a headless Chromium in a test.

Why not Selenium or Playwright: both bring a driver stack (and Playwright a browser
download that cannot reach its host here) for what is a handful of CDP calls over one
websocket: open a tab, navigate, type, run a bit of JavaScript, take a screenshot. The
``websockets`` package is already installed (Airflow's API server needs it).

Chromium is Debian's (``include/install_chromium.sh``), started with a fresh profile, no
background traffic of its own (no updates, sync, QUIC, first-run pages) and DevTools on
a port it picks itself on 127.0.0.1 (``DevToolsActivePort``).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)


class CdpError(RuntimeError):
    """A CDP command failed, or the page did not get where a test waited for it to."""


class Browser:
    """One headless Chromium process and its browser-level DevTools connection."""

    def __init__(
        self,
        executable: str,
        user_data_dir: Path,
        log_path: Path,
        *,
        window: tuple[int, int] = (1400, 1000),
    ) -> None:
        user_data_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [
                executable,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={user_data_dir}",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--window-size={window[0]},{window[1]}",
                "about:blank",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._ids = itertools.count(1)
        self._ws = self._connect(user_data_dir / "DevToolsActivePort", log_path)

    def _connect(self, port_file: Path, log_path: Path) -> ClientConnection:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CdpError(f"chromium exited ({self.process.returncode}); log {log_path}")
            lines = port_file.read_text().split("\n") if port_file.exists() else []
            if len(lines) >= 2 and lines[1]:
                url = f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"
                return connect(url, max_size=None, open_timeout=10)
            time.sleep(0.1)
        raise CdpError(f"chromium did not open DevTools within 30 s; log {log_path}")

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (events in between are dropped)."""
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            reply = json.loads(self._ws.recv(timeout=max(deadline - time.monotonic(), 0.1)))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
        raise CdpError(f"{method}: no answer within 60 s")

    def new_page(self) -> Page:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = Page(self, session)
        page.call("Page.enable")
        page.call("Runtime.enable")
        return page

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        with contextlib.suppress(Exception):
            self._ws.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._log.close()


class Page:
    """A tab, attached with a flat session."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.call(method, self.session, **params)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises are awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30, what: str = "") -> Any:
        """Poll until ``expression`` is truthy; return its value."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
                if value:
                    return value
            except CdpError as exc:  # e.g. the document is being replaced
                last_error = str(exc)
            time.sleep(0.25)
        url = self.evaluate("location.href")
        raise CdpError(f"waited {timeout:.0f}s for {what or expression} at {url} {last_error}")

    def navigate(self, url: str, timeout: float = 30) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'", timeout, f"{url} to load")

    def type_into(self, selector: str, text: str) -> None:
        """Focus a field and type into it as a keyboard would (frameworks see the input)."""
        self.wait_for(f"!!document.querySelector({json.dumps(selector)})", what=selector)
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def screenshot(self, path: Path, *, full_page: bool = False) -> None:
        """A PNG of the viewport, or of the whole document."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            width, height = self.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
            )
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=int(width),
                height=int(height),
                deviceScaleFactor=1,
                mobile=False,
            )
        try:
            data = self.call("Page.captureScreenshot", **params)["data"]
        finally:
            if full_page:
                self.call("Emulation.clearDeviceMetricsOverride")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
