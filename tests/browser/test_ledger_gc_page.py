"""The "Ledger GC" page in a real browser, in a real Airflow, after a demo run.

``include/airflow_local.py standalone`` (what ``bin/airflow`` runs) starts Airflow 3.3
against a store on the session's local stack. Meanwhile a demo runs there with the
library's entry points: the demo topics and leaks, two trims, three orphan cycles (one
refused by the orphan-fraction guard, one that registers, one an hour later that
deletes) and a marker whose delete failed. Then headless Chromium, driven by Playwright,
signs in on Airflow's login page, opens the page from the navigation
(``/plugin/ledger-gc``), and every figure it shows must equal ``ledgergc status --json``'s
overview. Screenshots and the metrics go to ``artifacts/`` (git-ignored).

Chromium comes from Debian (``include/install_chromium.sh``, run here when missing) and
Playwright launches it by path (``executable_path``): no browser is ever downloaded. The
test is skipped, saying why, only if that install fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from playwright.sync_api import Page, sync_playwright

from ledger_gc import marking
from ledger_gc.config.edge import block_store, resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.storage.s3 import LedgerStorage

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
INSTALL_CHROMIUM = REPO_ROOT / "include" / "install_chromium.sh"
LEDGERGC = Path(sys.executable).parent / "ledgergc"
HOUR_MS = 3_600_000
FAILED_MARKER_TOPIC = "acme/prod/persistent/audit-trail"


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's Chromium, installed by the project's script if missing."""
    if not CHROMIUM.exists():
        try:
            result = subprocess.run(
                ["bash", str(INSTALL_CHROMIUM)], capture_output=True, text=True, timeout=900
            )
            detail = f"exit {result.returncode}: {(result.stdout + result.stderr)[-800:]}"
        except (OSError, subprocess.TimeoutExpired) as exc:
            detail = str(exc)
        if not CHROMIUM.exists():
            pytest.skip(
                f"Chromium missing and {INSTALL_CHROMIUM.name} could not install it ({detail})"
            )
    return str(CHROMIUM)


# --- the demo state ---------------------------------------------------------------------------


def new_store(local_stack: Any, s3_client: Any, state_dir: Path) -> Settings:
    """A fresh chroot and bucket on the session's stack, deleting orphans after 5 s."""
    name = f"browser-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=local_stack.zk_hosts)
    root.start(timeout=30)
    try:
        root.ensure_path(f"/{name}")
    finally:
        root.stop()
        root.close()
    s3_client.create_bucket(Bucket=name)
    return Settings(
        zk_address=f"{local_stack.zk_hosts}/{name}",
        s3_endpoint=local_stack.s3_endpoint,
        bucket=name,
        prefix="ledgers",
        state_dir=state_dir,
        delete_enabled=True,
        grace_seconds=5,
        retention_seconds=5,
    )


def leave_a_failed_marker(settings: Settings) -> None:
    """A consumed ledger that a trim marked and could not delete (S3 said SlowDown), as
    the next trim would find it: the page's backlog and last error."""
    storage = LedgerStorage(block_store(settings))
    with MetadataStore.open(zk_endpoint(settings)) as store:
        ml = ManagedLedger.open(
            FAILED_MARKER_TOPIC, store, storage, ManagedLedgerConfig(max_entries_per_ledger=10)
        )
        cursor = ml.open_cursor("archiver", "earliest")
        positions = ml.add_entries([b"audit-record".ljust(200, b".")] * 25)
        cursor.mark_delete(positions[-1])
        ml.close()
        first = store.get_managed_ledger(FAILED_MARKER_TOPIC).value.ledgerInfo[0].ledgerId
        now = int(time.time() * 1000)

        def mark_and_fail(info: Any) -> bool:
            marking.mark_deletable(info, [first], now - 90_000)
            marking.record_failures(info, {first: "SlowDown: reduce your request rate"}, now)
            return True

        store.update_managed_ledger(FAILED_MARKER_TOPIC, mark_and_fail)


def run_demo(settings: Settings) -> None:
    """The demo's store and leaks, then trims and orphan cycles over them."""
    from demo_leaks import plant_leaks, plant_orphan_ledgers
    from demo_store import write_demo_store
    from ledger_gc.orphans.cycle import run_orphan_cycle
    from ledger_gc.orphans.witness import ServerClocks
    from ledger_gc.trim.run import run_trim

    write_demo_store(settings)
    run_trim(resolve(settings), source="demo")
    leaks = plant_leaks(settings)
    run_trim(resolve(settings), source="demo")
    # Refused: with a limit of 0.01 % the leaks are "too many orphans to be true".
    run_orphan_cycle(resolve(settings.with_overrides(orphan_max_fraction=0.0001)))
    run_orphan_cycle(resolve(settings))  # registers the leaks
    ml_name = leaks["orphan_ledgers"][0]["ml_name"]
    with MetadataStore.open(zk_endpoint(settings)) as store:
        # Two of different sizes: the page's table of registered orphans sorts them.
        for entries in (5, 50):
            plant_orphan_ledgers(
                settings, store, LedgerStorage(block_store(settings)), ml_name, 1, entries
            )
    # An hour later: grace and retention are over for the first leaks (deleted after a
    # live re-check); the ledgers planted since are registered and wait in grace.
    run_orphan_cycle(
        resolve(settings),
        clock=lambda: int(time.time() * 1000) + HOUR_MS,
        witness=ServerClocks(offset_ms=HOUR_MS),  # the servers' clocks an hour on too
    )
    leave_a_failed_marker(settings)


# --- Airflow ----------------------------------------------------------------------------------


def store_env(settings: Settings) -> dict[str, str]:
    return {
        "LEDGERGC_ZK_HOSTS": settings.zk_hosts,
        "LEDGERGC_S3_ENDPOINT": settings.s3_endpoint or "",
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_PREFIX": settings.prefix,
        "LEDGERGC_STATE_DIR": str(settings.state_dir),
    }


@dataclass
class LocalAirflow:
    process: subprocess.Popen[bytes]
    home: Path
    log: Path

    def login(self, timeout: float = 400) -> dict[str, str]:
        """The URL and login once the API server answers (``ledgergc-login.json``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"airflow_local exited ({self.process.returncode}); log {self.log}")
            login_file = self.home / "ledgergc-login.json"
            if login_file.exists():
                login = json.loads(login_file.read_text())
                try:
                    with urllib.request.urlopen(f"{login['url']}/api/v2/monitor/health", timeout=2):
                        return dict(login)
                except (urllib.error.URLError, OSError):
                    pass
            time.sleep(1)
        pytest.fail(f"Airflow did not come up within {timeout:.0f}s; log {self.log}")

    def stop(self) -> int:
        """Ctrl-C, as an operator stops it (it stops standalone with SIGINT in turn)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


@dataclass
class Stage:
    settings: Settings
    login: dict[str, str]
    status: dict[str, Any]
    metrics: str
    listing: dict[str, Any]


def ledgergc(settings: Settings, *args: str) -> str:
    result = subprocess.run(
        [str(LEDGERGC), *args],
        env={**os.environ, **store_env(settings)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def stage(
    chromium: str, local_stack: Any, s3_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stage]:
    """Airflow started (in the background) while the demo runs; both ready."""
    base = tmp_path_factory.mktemp("browser")
    settings = new_store(local_stack, s3_client, base / "state")
    home, log = base / "airflow-home", base / "airflow-local.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                str(REPO_ROOT / "include" / "airflow_local.py"),
                "standalone",
                "--no-stack",
                "--port=0",
                f"--home={home}",
                f"--state-dir={settings.state_dir}",
            ],
            env={**env, **store_env(settings)},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            # As a shell starts a background job (`bin/airflow &`): SIGINT ignored. Ctrl-C
            # (stop() sends SIGINT) must still stop Airflow cleanly.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    airflow = LocalAirflow(process, home, log)
    try:
        run_demo(settings)
        login = airflow.login()
        status = json.loads(ledgergc(settings, "status", "--json"))
        metrics = ledgergc(settings, "status", "--metrics")
        listing = json.loads(ledgergc(settings, "orphans", "--list", "--json"))
        yield Stage(settings, login, status, metrics, listing)
    finally:
        code = airflow.stop()
        assert code == 0, f"airflow_local did not stop cleanly ({code}); log {log}"


# --- the browser ------------------------------------------------------------------------------

FIGURES_IN_FRAME = """(() => {
  const frame = document.querySelector('iframe[title="Ledger GC"]');
  const doc = frame && frame.contentDocument;
  if (!doc || !doc.querySelector('[data-key]')) return null;
  return Array.from(doc.querySelectorAll('[data-key]'))
    .map(e => [e.getAttribute('data-key'), e.getAttribute('data-value')]);
})()"""


# Flags that work in this sandbox (no GPU, no network beyond loopback, no user namespace).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def sign_in(page: Page, login: dict[str, str], next_path: str) -> None:
    page.goto(f"{login['url']}/auth/login?next={next_path}")
    page.fill("input[name=username]", login["username"])
    page.fill("input[name=password]", login["password"])
    page.click("button[type=submit]")
    page.wait_for_function(f"location.pathname === {json.dumps(next_path)}", timeout=60_000)


def lookup(data: Any, path: list[Any]) -> Any:
    for part in path:
        data = data[part]
    return data


ROW_PREFIXES = "rows => rows.filter(r => !r.hidden).map(r => r.dataset.prefix)"
SIZES = "cells => cells.map(c => Number(c.dataset.sort))"


def use_the_registered_orphans_table(page: Page) -> dict[str, Any]:
    """Read the table as shown, sort it by size both ways, filter it to one row."""
    rows = "#registered-orphans tbody tr"
    size_header = "#registered-orphans thead th:nth-child(5)"
    seen: dict[str, Any] = {"shown": page.eval_on_selector_all(rows, ROW_PREFIXES)}
    page.click(size_header)
    seen["ascending"] = page.eval_on_selector_all(f"{rows} td:nth-child(5)", SIZES)
    page.click(size_header)
    seen["descending"] = page.eval_on_selector_all(f"{rows} td:nth-child(5)", SIZES)
    biggest = page.eval_on_selector_all(rows, ROW_PREFIXES)[0]
    page.fill("#orphan-filter", biggest)
    seen["filtered"] = page.eval_on_selector_all(rows, ROW_PREFIXES)
    seen["biggest"] = biggest
    seen["url"] = page.url
    return seen


def test_the_page_shows_what_ledgergc_status_says(stage: Stage, chromium: str, tmp_path: Path):
    overview = stage.status["overview"]
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_FLAGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            sign_in(page, stage.login, "/plugin/ledger-gc")
            figures = page.wait_for_function(FIGURES_IN_FRAME, timeout=60_000).json_value()
            time.sleep(1)  # let the navigation finish drawing for the screenshot
            page.screenshot(path=ARTIFACTS / "ledger-gc-in-airflow.png")
            page.goto(f"{stage.login['url']}/ledger-gc/")
            page.screenshot(path=ARTIFACTS / "ledger-gc-page.png", full_page=True)
            served_metrics = page.evaluate("fetch('/ledger-gc/metrics').then(r => r.text())")
            table = use_the_registered_orphans_table(page)
        finally:
            browser.close()
    (ARTIFACTS / "ledger-gc-metrics.txt").write_text(stage.metrics)
    (ARTIFACTS / "ledger-gc-status.json").write_text(json.dumps(stage.status, indent=2))

    shown = {tuple(json.loads(key)): json.loads(value) for key, value in figures}
    mismatches = {
        key: (value, lookup(overview, list(key)))
        for key, value in shown.items()
        if lookup(overview, list(key)) != value
    }
    assert not mismatches, f"page vs `ledgergc status --json` (shown, status): {mismatches}"

    # The demo's story is on the page: deletions after the live re-check, a new orphan in
    # grace, the refused cycle, the trim's reclaimed bytes and the failed marker.
    def figure(*key: Any) -> Any:
        return shown[tuple(key)]

    assert figure("orphans", "phase_totals", "deleted", "count") == 3
    assert figure("orphans", "phases", "deleted", "orphan-partition", "count") == 1
    assert figure("orphans", "phase_totals", "waiting_grace", "count") == 2
    assert figure("orphans", "phase_totals", "registered", "count") == 2
    assert figure("trim", "backlog", "pending_markers") == 1
    assert figure("deletions", "reclaimed_bytes", "trim") > 0
    assert figure("deletions", "reclaimed_bytes", "orphan-removal") > 0
    assert [r["guard"] for r in overview["orphans"]["refusals"]] == ["orphan-fraction"]
    assert overview["trim"]["last_errors"][0]["error"].startswith("SlowDown")
    assert len(overview["orphans"]["trend"]) == 3
    # A store of ledger-gc's own (no /admin/policies): Pulsar's metadata is not surveyed
    # (LEDGERGC_PULSAR_METADATA=auto), so neither its figures nor its section are shown.
    assert overview["orphans"]["pulsar_metadata"] is None
    assert not [key for key in shown if key[:2] == ("orphans", "pulsar_metadata")]

    # The plugin's /metrics and `ledgergc status --metrics` agree (but for the marker's
    # age, which grows between the two reads).
    def steady(text: str) -> list[str]:
        return [line for line in text.splitlines() if "oldest_age_seconds " not in line]

    assert steady(served_metrics) == steady(stage.metrics)

    # The registered orphans: the page's table is `ledgergc orphans --list --json`, soonest
    # first; it sorts by a column both ways and filters as one types.
    registered = stage.listing["orphans"]
    assert table["shown"] == [item["prefix"] for item in registered]
    assert len(registered) == 2
    assert all("grace" in item["waiting_for"] for item in registered)
    assert table["ascending"] == sorted(table["ascending"])
    assert table["descending"] == sorted(table["ascending"], reverse=True)
    assert table["ascending"] != table["descending"]
    assert table["filtered"] == [table["biggest"]]
    assert "#filter=" in table["url"]
    assert 'OrphanLogPartitionCount{namespace="public/default",phase="deleted"} 1' in (
        stage.metrics.splitlines()
    )
    assert "ledgergc_trim_markers_pending 1" in stage.metrics.splitlines()
    assert (ARTIFACTS / "ledger-gc-page.png").stat().st_size > 10_000


# What a reader of the page at a given width cannot see: a page wider than its window, an
# x-axis label shown twice, a legend entry clipped or covered, a series drawn under
# another so that no point of it shows (registered = waiting in grace, often).
LAYOUT = r"""(root) => {
  const doc = root || document;
  const win = doc.defaultView;
  const overlap = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 &&
    a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const charts = Array.from(doc.querySelectorAll('svg.chart')).map(svg => {
    svg.scrollIntoView({block: 'center'});  // elementFromPoint sees the window only
    const box = svg.getBoundingClientRect();
    const title = svg.getAttribute('aria-label');
    const box_of = t => {
      const r = t.getBoundingClientRect();
      return {name: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
    };
    const xTexts = Array.from(svg.querySelectorAll('text.axis.x, text.axis[text-anchor=middle]'))
      .filter(t => t.textContent !== 'no runs yet');
    const xLabels = xTexts.map(t => t.textContent);
    const legend = Array.from(svg.querySelectorAll('text.legend')).map(box_of);
    const clipped = [...legend, ...xTexts.map(box_of)]
      .filter(r => r.left < box.left - 0.5 || r.right > box.right + 0.5).map(r => r.name);
    const covered = legend.filter((r, i) => legend.some((o, j) => j !== i && overlap(r, o)))
      .map(r => r.name);
    // A series (a legend entry: its colour) shows if some point near its line or on one
    // of its dots is painted by it, not by a series drawn over it.
    const m = svg.getScreenCTM();
    const at = (x, y) => doc.elementFromPoint(m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f);
    const painted = new Set();
    for (const line of svg.querySelectorAll('polyline')) {
      const pts = line.getAttribute('points').trim().split(/\s+/)
        .map(p => p.split(',').map(Number));
      for (let i = 0; i + 1 < pts.length; i++) {
        for (const f of [0.25, 0.5, 0.75]) {
          const x = pts[i][0] + f * (pts[i + 1][0] - pts[i][0]);
          const y = pts[i][1] + f * (pts[i + 1][1] - pts[i][1]);
          for (let dy = -6; dy <= 6; dy += 0.5) {
            if (at(x, y + dy) === line) painted.add(line.getAttribute('stroke'));
          }
        }
      }
    }
    for (const dot of svg.querySelectorAll('circle')) {
      const cx = Number(dot.getAttribute('cx')), cy = Number(dot.getAttribute('cy'));
      const r = Number(dot.getAttribute('r'));
      for (let d = -r + 0.5; d < r; d += 0.5) {
        if (at(cx + d, cy) === dot || at(cx, cy + d) === dot) painted.add(dot.getAttribute('fill'));
      }
    }
    const keys = Array.from(svg.querySelectorAll('rect')).map(r => r.getAttribute('fill'));
    const hidden = legend.filter((entry, i) => !painted.has(keys[i])).map(entry => entry.name);
    return {title, xLabels, repeated: xLabels.filter((t, i) => xLabels.indexOf(t) !== i),
            clipped, covered, hidden};
  });
  return {scrollWidth: doc.documentElement.scrollWidth, width: win.innerWidth, charts};
}"""


def layout_problems(layout: dict[str, Any]) -> list[str]:
    problems = []
    if layout["scrollWidth"] > layout["width"]:
        problems.append(f"page {layout['scrollWidth']} px wide in a {layout['width']} px window")
    for chart in layout["charts"]:
        for what in ("repeated", "clipped", "covered", "hidden"):
            if chart[what]:
                problems.append(f"{chart['title']}: {what} {chart[what]}")
    return problems


def test_the_page_reads_at_800_px(stage: Stage, chromium: str):
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_FLAGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 800, "height": 1000})
            sign_in(page, stage.login, "/plugin/ledger-gc")
            page.wait_for_function(FIGURES_IN_FRAME, timeout=60_000)
            time.sleep(1)
            page.screenshot(path=ARTIFACTS / "ledger-gc-in-airflow-800.png")
            frame = page.frame_locator('iframe[title="Ledger GC"]').locator("html")
            in_frame = frame.evaluate(f"root => ({LAYOUT})(root.ownerDocument)")
            page.goto(f"{stage.login['url']}/ledger-gc/")
            page.screenshot(path=ARTIFACTS / "ledger-gc-page-800.png", full_page=True)
            alone = page.evaluate(f"({LAYOUT})(null)")
        finally:
            browser.close()

    assert in_frame["charts"] and alone["charts"]
    problems = [f"alone: {p}" for p in layout_problems(alone)]
    problems += [f"in Airflow's frame: {p}" for p in layout_problems(in_frame)]
    assert not problems, "\n".join(problems)
