"""``python include/local_stack run|up``: start the local stack for a command or a shell.

The stack here is the whole one: ZooKeeper, SeaweedFS S3, and the GCS and Azure
emulators (fake-gcs-server, Azurite) that the demo's and the benchmarks' tiered storage
on those stores needs; ``LOCAL_STACK_GCS_ENDPOINT`` and ``LOCAL_STACK_AZURE_BLOB_ENDPOINT``
say where they are.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from local_stack.server_process import LocalStackError
from local_stack.stack import DEFAULT_BASE_DIR, LocalStack


def command_env(stack_env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """The environment for a command run against the stack.

    The user's own ``LEDGERGC_*`` choices (bucket, prefix, delete switch...) are kept; only
    where the servers are and the credentials come from the stack. A real AWS profile or
    session token is dropped so that boto3 cannot mix real credentials into a local run.
    """
    env = {k: v for k, v in base.items() if k not in ("AWS_PROFILE", "AWS_SESSION_TOKEN")}
    env.update(stack_env)
    return env


@contextlib.contextmanager
def _terminate_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into SystemExit so that ``finally`` stops the servers.

    SIGINT gets Python's usual KeyboardInterrupt even if we were started with it ignored (a
    shell's background job), so that ``kill -INT`` stops ``up`` as Ctrl-C would.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _terminal_sends_sigint_to_us() -> bool:
    """Whether a Ctrl-C on our terminal reaches our process group (and so the child too)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def run_command(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` to completion and return its exit code (128+N if killed by signal N).

    The command stays in our process group so that it keeps the terminal (interactive
    commands work) and gets Ctrl-C from it directly; we only forward signals it would not
    otherwise see, and escalate a repeated Ctrl-C to SIGTERM.
    """
    child = subprocess.Popen(list(command), env=dict(env))
    interrupts = 0

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        if signum == signal.SIGINT:
            interrupts += 1
            if interrupts > 1:
                child.send_signal(signal.SIGTERM)
            elif not _terminal_sends_sigint_to_us():
                child.send_signal(signal.SIGINT)
        else:
            child.send_signal(signum)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in signals}
    try:
        returncode = child.wait()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return returncode if returncode >= 0 else 128 - returncode


def _cmd_run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print(
            "local_stack run: no command given (usage: run [--base-dir DIR] -- CMD ...)",
            file=sys.stderr,
        )
        return 2
    stack = LocalStack(args.base_dir, object_stores=True)
    with _terminate_on_signals():
        try:
            _say(
                "starting ZooKeeper, SeaweedFS S3, fake-gcs-server and Azurite "
                f"(logs in {stack.log_dir})"
            )
            stack.start()
            _say(_addresses(stack))
            _say(f"running {shlex.join(command)}")
            return run_command(command, command_env(stack.env(), os.environ))
        except LocalStackError as exc:
            print(f"local_stack: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # Ctrl-C while the stack was still starting
            return 128 + signal.SIGINT
        finally:
            stack.stop()


def _addresses(stack: LocalStack) -> str:
    """Where each server of the stack listens, in one line."""
    line = f"ZooKeeper {stack.zk_hosts}, S3 {stack.s3_endpoint}"
    if stack.gcs is not None:
        line += f", GCS {stack.gcs.endpoint}"
    if stack.azure is not None:
        line += f", Azure Blob {stack.azure.account_url}"
    return line


def _cmd_up(args: argparse.Namespace) -> int:
    stack = LocalStack(args.base_dir, object_stores=True)
    with _terminate_on_signals():
        try:
            stack.start()
            exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in stack.env().items())
            env_file = stack.base_dir / "env.sh"
            env_file.write_text(exports)
            print(exports, end="")
            _say(_addresses(stack))
            _say(f"(also in {env_file}; logs in {stack.log_dir}); Ctrl-C stops the stack")
            while stack.running:
                time.sleep(1)
            print(f"local_stack: a server exited; logs in {stack.log_dir}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
        except LocalStackError as exc:
            print(f"local_stack: {exc}", file=sys.stderr)
            return 1
        finally:
            stack.stop()


def _say(message: str) -> None:
    print(f"local_stack: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python include/local_stack``."""
    parser = argparse.ArgumentParser(
        prog="local_stack",
        description=(
            "Run a local ZooKeeper, SeaweedFS S3, fake-gcs-server and Azurite for ledger-gc."
        ),
    )
    sub = parser.add_subparsers(dest="action", required=True)
    common: dict[str, Any] = {
        "type": Path,
        "default": DEFAULT_BASE_DIR,
        "help": f"data and logs go here (default {DEFAULT_BASE_DIR})",
    }
    run = sub.add_parser("run", help="start the stack, run a command against it, stop it")
    run.add_argument("--base-dir", **common)
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    run.set_defaults(func=_cmd_run)
    up = sub.add_parser("up", help="start the stack and keep it up until Ctrl-C")
    up.add_argument("--base-dir", **common)
    up.set_defaults(func=_cmd_up)
    args = parser.parse_args(argv)
    return int(args.func(args))
