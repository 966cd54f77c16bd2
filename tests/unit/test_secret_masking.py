"""The one log filter (``ledger_gc.config.secret_masking``) and who installs it.

Each case runs in a Python process of its own, as an edge (the command, a task, an
executor) is one: the masker is the process's record factory, which a test process must
not keep. Its stderr is the log, captured whole.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

from ledger_gc.config.secret_values import secret_values, zookeeper_digest
from ledger_gc.config.settings import Settings

SECRET = "S3cret-'quoted'\\-pw"


def run(code: str, *, stdin: bytes | None = None, env: dict[str, str] | None = None) -> str:
    """``code`` in a fresh interpreter; its stderr (the log) and stdout together."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        input=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr.decode()
    return (done.stderr + done.stdout).decode()


def test_every_logger_and_every_way_of_logging_is_masked() -> None:
    """Args, a mapping's repr, a traceback, a stack, a logger that does not propagate
    (kazoo's, py4j's) with a handler added after the install, a record made by hand (as
    a log forwarded from another process is), and a process with no logging set up (the
    last resort, as on an executor)."""
    log = run(
        f"""
        import logging, sys
        from ledger_gc.config.secret_masking import install_secret_masking
        secret = {SECRET!r}
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        install_secret_masking([secret])
        logging.getLogger("a").info("args %s and %r", secret, {{"password": secret}})
        try:
            raise ValueError("boom " + secret)
        except ValueError:
            logging.getLogger("a").exception("failed")
        logging.getLogger("a").info("stack", stack_info=True, extra={{"x": secret}})
        logging.getLogger("a").info({{"event": "structured", "value": secret}})
        alone = logging.getLogger("py4j.alone")
        alone.propagate = False
        late = logging.StreamHandler(sys.stderr)
        alone.addHandler(late)
        alone.warning("late handler %s", secret)
        made = logging.makeLogRecord({{"msg": "by hand %s", "args": (secret,), "levelno": 30}})
        logging.getLogger("a").handle(made)
        logging.getLogger().handlers.clear()
        logging.getLogger("kazoo.client").warning("last resort %s", secret)
        """
    )
    assert SECRET not in log and repr(SECRET)[1:-1] not in log, log
    seen_all = ("args ***", "boom ***", "'value': '***'", "late handler ***", "by hand ***")
    for seen in (*seen_all, "last resort ***"):
        assert seen in log, log
    assert "Traceback" in log and 'File "<string>"' in log, log


def test_the_forms_clients_derive_are_masked_without_being_told() -> None:
    from ledger_gc.config.secret_masking import SecretMasker

    masker = SecretMasker()
    lines = {
        "x-amz-security-token:IQoJb3JpZ2luX2VjE+/abc=": "x-amz-security-token:***",
        "{'X-Amz-Security-Token': b'IQoJb3Jp/Z2+luX='}": "{'X-Amz-Security-Token': b'***'}",
        "?X-Amz-Security-Token=IQo%2Fab&X-Amz-Date=1": "?X-Amz-Security-Token=***&X-Amz-Date=1",
        "<SecretAccessKey>nawB/Z8+Uo</SecretAccessKey>": "<SecretAccessKey>***</SecretAccessKey>",
        "<SessionToken>FQoG/ZX+Iv=</SessionToken>": "<SessionToken>***</SessionToken>",
        "'SecretAccessKey': 'nawB/Z8'": "'SecretAccessKey': '***'",
        "Signature=" + "ab12" * 16: "Signature=***",
        "Signature:\n" + "cd34" * 16: "Signature:\n***",
        "nc=00000001,response=" + "e" * 32: "nc=00000001,response=***",
        "rspauth=" + "f" * 32: "rspauth=***",
        "session_passwd: b'00ff00ff00ff00ff'": "session_passwd: b'***'",
        "Auth(scheme='digest', auth='gc:pw')": "Auth(scheme='digest', auth='gc:***')",
        "Id(scheme='digest', id='gc:JUl/5E/Zj+Q=')": "Id(scheme='digest', id='gc:***')",
        "at postgresql+psycopg://gc:/a+b%40c:d=@db:5432/x": "at postgresql+psycopg://gc:***@db:5432/x",
    }
    for line, masked in lines.items():
        assert masker.mask(line) == masked, line
    unchanged = "http://127.0.0.1:8333/bucket/key s3 ListObjectsV2 token bucket tokens: 5"
    assert masker.mask(unchanged) == unchanged


def test_a_settings_derived_secrets_are_listed() -> None:
    settings = Settings(
        zk_address="127.0.0.1:2181/x",
        zk_digest="gc:digest-pw",
        state_url="postgresql+psycopg://gc:/a+b%40c@db:5432/x",
        s3_secret_access_key="secret-key",
        s3_session_token="session-token",
    )
    found = secret_values(settings)
    for secret in ("digest-pw", zookeeper_digest("gc", "digest-pw"), "/a+b%40c", "/a+b@c"):
        assert secret in found, found
    assert {"secret-key", "session-token"} <= set(found)


def test_an_executor_masks_what_its_settings_carry_once_unpickled() -> None:
    """Settings reach an executor pickled: unpickling them is where its secrets enter
    that process, so that is where they are masked (nothing else configures its logs)."""
    settings = Settings(zk_address="127.0.0.1:2181/x", zk_digest="gc:digest-pw-exec")
    log = run(
        """
        import logging, pickle, sys
        settings = pickle.loads(sys.stdin.buffer.read())
        logging.getLogger("kazoo.client").warning("auth %s", settings.zk_digest)
        """,
        stdin=pickle.dumps(settings),
    )
    assert "digest-pw-exec" not in log and "auth gc:***" in log, log


def test_an_airflow_tasks_settings_are_masked_in_its_process() -> None:
    """A task's settings come from the hook (``settings_for``): from then on, its
    secrets are masked in every logger of the task's process (Airflow's own masker is fed
    them too)."""
    log = run(
        """
        import logging, sys
        from ledger_gc.airflow import settings_hook
        settings_hook._variable = lambda *a, **k: {}
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, force=True)
        settings = settings_hook.settings_for({})
        logging.getLogger("kazoo.client").debug("auth %s", settings.zk_digest)
        logging.getLogger("botocore.auth").debug("key %s", settings.s3_secret_access_key)
        """,
        env={
            "LEDGERGC_ZK_HOSTS": "127.0.0.1:2181/x",
            "LEDGERGC_ZK_DIGEST": "gc:digest-pw-task",
            "AWS_ACCESS_KEY_ID": "AKIATASK",
            "AWS_SECRET_ACCESS_KEY": "secret-key-task",
        },
    )
    assert "digest-pw-task" not in log and "secret-key-task" not in log, log
    assert "auth gc:***" in log and "key ***" in log, log
