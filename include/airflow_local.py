"""A local Airflow for ledger-gc: ``airflow standalone`` with the project's DAGs, plugin,
connections, variables and pools, against a local ZooKeeper + S3 stack, on loopback.

``airflow_settings.yaml`` is in the Astronomer CLI's format; plain Airflow imports JSON
files instead, so ``write_import_files`` converts it (connections, pools, variables),
pointing the connections at the stack that runs (or at ``LEDGERGC_*`` when given).

Known traps this handles:

* ``airflow standalone`` stops its components only on SIGINT (on SIGTERM it dies alone
  and leaves the scheduler and API server running), so it runs in its own session and
  is stopped with SIGINT, then TERM and KILL of its whole process group if it hangs;
* with a port other than 8080, ``[api] base_url`` must say so (tasks find the execution
  API through it);
* Airflow 3's standalone signs in with the SimpleAuthManager and a generated password;
  here the user is ``admin`` with a password kept in ``<home>/passwords.json`` (created
  once, printed at start), so the login is known to the operator and to tests;
* the JWT secret, Fernet key and API secret key are fixed per Airflow home, so that
  the API server's workers, the scheduler and the CLI imports agree.

Commands::

    python include/airflow_local.py standalone [--port 8080] [--home var/airflow]
        [--state-dir DIR] [--no-stack]       # until Ctrl-C; prints the URL and login
    python include/airflow_local.py import-files --out DIR   # only write the JSON files
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT_ROOT / "include"), str(PROJECT_ROOT / "plugins")]

from local_stack.server_process import LOOPBACK, LocalStackError, free_port  # noqa: E402
from local_stack.stack import LocalStack  # noqa: E402

SETTINGS_YAML = PROJECT_ROOT / "airflow_settings.yaml"
DEFAULT_HOME = PROJECT_ROOT / "var" / "airflow"
DEFAULT_PORT = 8080
USERNAME = "admin"
LOGIN_FILE = "ledgergc-login.json"
ZK_CONN, S3_CONN = "ledgergc_zookeeper", "ledgergc_s3"
READY_TIMEOUT_SECONDS = 300
STOP_TIMEOUT_SECONDS = 60


def say(message: str) -> None:
    print(f"airflow_local: {message}", file=sys.stderr, flush=True)


# --- airflow_settings.yaml -> Airflow's import files -----------------------------------------


@dataclass(frozen=True)
class StoreLocation:
    """Where the store is: what the connections must say so that tasks find it."""

    zk_hosts: str  # host:port[,host:port][/chroot]
    s3_endpoint: str | None
    bucket: str | None = None
    prefix: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StoreLocation | None:
        """From ``LEDGERGC_*`` variables, if ``LEDGERGC_ZK_HOSTS`` is set."""
        if not env.get("LEDGERGC_ZK_HOSTS"):
            return None
        return cls(
            zk_hosts=env["LEDGERGC_ZK_HOSTS"],
            s3_endpoint=env.get("LEDGERGC_S3_ENDPOINT") or None,
            bucket=env.get("LEDGERGC_BUCKET") or None,
            prefix=env.get("LEDGERGC_PREFIX"),
        )


def load_settings_yaml(path: Path = SETTINGS_YAML) -> dict[str, list[dict[str, Any]]]:
    data = yaml.safe_load(path.read_text()) or {}
    section = data.get("airflow") or {}
    return {key: list(section.get(key) or []) for key in ("connections", "pools", "variables")}


def _extra(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return dict(json.loads(value)) if value.strip() else {}
    return dict(value or {})


def convert_connections(
    connections: list[dict[str, Any]], location: StoreLocation | None
) -> dict[str, dict[str, Any]]:
    """``airflow connections import`` JSON; the ledger-gc ones point at ``location``."""
    result: dict[str, dict[str, Any]] = {}
    for conn in connections:
        entry: dict[str, Any] = {"conn_type": conn.get("conn_type") or "generic"}
        for source, target in (
            ("conn_host", "host"),
            ("conn_port", "port"),
            ("conn_login", "login"),
            ("conn_password", "password"),
            ("conn_schema", "schema"),
            ("conn_description", "description"),
        ):
            if conn.get(source) not in (None, ""):
                entry[target] = conn[source]
        extra = _extra(conn.get("conn_extra"))
        conn_id = str(conn["conn_id"])
        if location is not None and conn_id == ZK_CONN:
            hosts, _, chroot = location.zk_hosts.partition("/")
            entry["host"] = hosts  # "h1:p1,h2:p2" (settings_hook keeps it whole)
            entry.pop("port", None)
            extra["chroot"] = chroot
        if location is not None and conn_id == S3_CONN:
            extra["endpoint_url"] = location.s3_endpoint or ""
            if location.bucket:
                extra["bucket"] = location.bucket
            if location.prefix is not None:
                extra["prefix"] = location.prefix
        entry["extra"] = json.dumps(extra, sort_keys=True)
        result[conn_id] = entry
    return result


def convert_pools(pools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``airflow pools import`` JSON."""
    return {
        str(pool["pool_name"]): {
            "slots": int(pool.get("pool_slot", 1)),
            "description": pool.get("pool_description") or "",
            "include_deferred": bool(pool.get("include_deferred", False)),
        }
        for pool in pools
    }


def convert_variables(variables: list[dict[str, Any]]) -> dict[str, Any]:
    """``airflow variables import`` JSON."""
    return {str(v["variable_name"]): v.get("variable_value") for v in variables}


def write_import_files(out_dir: Path, location: StoreLocation | None) -> dict[str, Path]:
    """Write connections.json, pools.json and variables.json; return their paths."""
    settings = load_settings_yaml()
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "connections": convert_connections(settings["connections"], location),
        "pools": convert_pools(settings["pools"]),
        "variables": convert_variables(settings["variables"]),
    }
    paths = {}
    for name, content in files.items():
        path = out_dir / f"{name}.json"
        path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
        path.chmod(0o600)  # connections may hold credentials
        paths[name] = path
    return paths


# --- the Airflow home ------------------------------------------------------------------------


def _home_secrets(home: Path) -> dict[str, str]:
    """Secrets fixed for this Airflow home (created once): every process must agree."""
    path = home / "ledgergc-secrets.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    values = {
        "fernet_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "jwt_secret": secrets.token_urlsafe(64),
        "api_secret_key": secrets.token_urlsafe(32),
        "password": secrets.token_urlsafe(12),
    }
    home.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))
    path.chmod(0o600)
    return values


def airflow_env(
    home: Path, port: int, state_dir: Path, base: Mapping[str, str], password: str | None
) -> tuple[dict[str, str], str]:
    """The environment of ``airflow standalone`` and of the import commands, and the password."""
    values = _home_secrets(home)
    password = password or values["password"]
    passwords_file = home / "passwords.json"
    passwords_file.write_text(json.dumps({USERNAME: password}))
    passwords_file.chmod(0o600)
    env = {k: v for k, v in base.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        {
            # standalone starts its components as `airflow ...` from PATH: this venv's.
            "PATH": f"{venv_bin}:{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__FERNET_KEY": values["fernet_key"],
            "AIRFLOW__API_AUTH__JWT_SECRET": values["jwt_secret"],
            "AIRFLOW__API__SECRET_KEY": values["api_secret_key"],
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://{LOOPBACK}:{port}",
            "AIRFLOW__API__WORKERS": "1",  # a laptop's Airflow; saves a few hundred MB
            # The scheduler's and triggerer's log servers (JWT-protected, and bound to all
            # interfaces by Airflow): free ports, so two local Airflows do not collide.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
            "LEDGERGC_STATE_DIR": str(state_dir.resolve()),
            # Task processes find the library and the local-stack helpers.
            "PYTHONPATH": os.pathsep.join(
                [str(PROJECT_ROOT / "plugins"), str(PROJECT_ROOT / "include")]
                + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
            ),
        }
    )
    return env, password


def run_airflow(env: Mapping[str, str], *args: str, log: Path) -> None:
    """An ``airflow`` CLI command; its output goes to ``log`` (shown if it fails)."""
    airflow = str(Path(sys.executable).parent / "airflow")
    with open(log, "ab") as out:
        result = subprocess.run([airflow, *args], env=dict(env), stdout=out, stderr=out)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"airflow_local: `airflow {' '.join(args)}` failed; log {log}:\n{tail}")


def prepare_home(env: Mapping[str, str], home: Path, location: StoreLocation | None) -> None:
    """Migrate the DB and import the connections, pools and variables."""
    log = home / "logs" / "airflow-local-setup.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    files = write_import_files(home / "import", location)
    say(f"migrating the metadata DB and importing {SETTINGS_YAML.name} (log {log})")
    run_airflow(env, "db", "migrate", log=log)
    run_airflow(env, "connections", "import", "--overwrite", str(files["connections"]), log=log)
    run_airflow(env, "pools", "import", str(files["pools"]), log=log)
    variables = str(files["variables"])
    run_airflow(env, "variables", "import", "-a", "overwrite", variables, log=log)


def yaml_bucket() -> str:
    """The bucket that the ``ledgergc_s3`` connection of the YAML names."""
    for conn in load_settings_yaml()["connections"]:
        if conn["conn_id"] == S3_CONN:
            return str(_extra(conn.get("conn_extra")).get("bucket") or "ledger-gc")
    return "ledger-gc"


def create_bucket(location: StoreLocation, bucket: str, env: Mapping[str, str]) -> None:
    """The stack's S3 starts empty; the DAGs check that their bucket exists."""
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=location.s3_endpoint,
        region_name=env.get("AWS_DEFAULT_REGION", "us-east-1"),
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
    )
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=bucket)


# --- running standalone ----------------------------------------------------------------------


def wait_until_serving(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Until the API server answers its health check (or standalone exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"airflow_local: airflow standalone exited ({process.returncode})")
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise SystemExit(f"airflow_local: the API server did not answer on {url} in {timeout:.0f}s")


def stop_standalone(process: subprocess.Popen[bytes]) -> int:
    """SIGINT (standalone's clean stop), then TERM and KILL of its process group."""
    for sig, wait in (
        (signal.SIGINT, STOP_TIMEOUT_SECONDS),
        (signal.SIGTERM, 15),
        (signal.SIGKILL, 5),
    ):
        if process.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            if sig == signal.SIGINT:
                process.send_signal(sig)
            else:
                say(f"standalone did not stop; sending {sig.name} to its process group")
                os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)
    # Its components (api-server workers...) are in the same group: none may outlive it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    return process.wait()


class _Stop(Exception):
    """SIGTERM/SIGHUP to this script: stop as on Ctrl-C."""


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop


def _default_sigint() -> None:
    """In standalone's process before exec: SIGINT back to its default. A shell starts a
    background job (``bin/airflow &``, ``nohup``) with SIGINT ignored, children inherit
    that, and Python then installs no handler: standalone could never be stopped cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def standalone(args: argparse.Namespace) -> int:
    home = Path(args.home).resolve()
    state_dir = Path(args.state_dir or home / "state").resolve()
    port = args.port or free_port()
    url = f"http://{LOOPBACK}:{port}"
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    # Ctrl-C (SIGINT) stops us even when started as a background job, which ignores it.
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    stack: LocalStack | None = None
    process: subprocess.Popen[bytes] | None = None
    try:
        base = dict(os.environ)
        location = StoreLocation.from_env(base) if args.no_stack else None
        if args.no_stack and location is None:
            say("--no-stack needs LEDGERGC_ZK_HOSTS (and LEDGERGC_S3_ENDPOINT) set")
            return 2
        if location is None:
            stack = LocalStack(home / "local-stack")
            say(f"starting ZooKeeper and SeaweedFS S3 (logs in {stack.log_dir})")
            stack.start()
            base.update(stack.env())
            location = StoreLocation(zk_hosts=stack.zk_hosts, s3_endpoint=stack.s3_endpoint)
            create_bucket(location, yaml_bucket(), base)
        env, password = airflow_env(home, port, state_dir, base, args.password)
        prepare_home(env, home, location)
        login = {"url": url, "username": USERNAME, "password": password}
        (home / LOGIN_FILE).write_text(json.dumps({**login, "state_dir": str(state_dir)}))
        (home / LOGIN_FILE).chmod(0o600)
        say(f"starting airflow standalone on {url} (AIRFLOW_HOME={home})")
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), "standalone"],
            env=env,
            cwd=PROJECT_ROOT,
            start_new_session=True,  # Ctrl-C reaches us only; we stop it with SIGINT
            preexec_fn=_default_sigint,
        )
        wait_until_serving(url, process, READY_TIMEOUT_SECONDS)
        print(
            f"\nLedger GC on Airflow is ready: {url}/plugin/ledger-gc\n"
            f"  sign in as {USERNAME} / {password}\n"
            f"  ZooKeeper {location.zk_hosts}, S3 {location.s3_endpoint}, state dir {state_dir}\n"
            "  Ctrl-C stops Airflow and the local stack\n",
            flush=True,
        )
        return process.wait()
    except (KeyboardInterrupt, _Stop):
        say("stopping")
        return 0
    except LocalStackError as exc:
        say(str(exc))
        return 1
    finally:
        if process is not None:
            code = stop_standalone(process)
            say(f"airflow standalone stopped ({code})")
        if stack is not None:
            stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def import_files(args: argparse.Namespace) -> int:
    paths = write_import_files(Path(args.out), StoreLocation.from_env(os.environ))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="airflow_local.py",
        description="A local Airflow (standalone) with ledger-gc's DAGs, plugin and settings.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("standalone", help="airflow standalone with the project, until Ctrl-C")
    run.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
    run.add_argument("--home", default=str(DEFAULT_HOME), help="AIRFLOW_HOME (kept)")
    run.add_argument("--state-dir", help="LEDGERGC_STATE_DIR (default HOME/state)")
    run.add_argument("--password", help="the admin password (default: generated once)")
    run.add_argument(
        "--no-stack",
        action="store_true",
        help="use the store at LEDGERGC_ZK_HOSTS/LEDGERGC_S3_ENDPOINT, start no stack",
    )
    run.set_defaults(func=standalone)
    files = sub.add_parser("import-files", help="write the Airflow import files only")
    files.add_argument("--out", required=True)
    files.set_defaults(func=import_files)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
