"""A slip in a JAAS file never prints its password (issue 33).

Run through the real ``ledgergc`` command, as an operator meets it: the error on stderr
and in ``--json``'s ``error``, for ``LEDGERGC_ZK_JAAS``, ``LEDGERGC_BK_ZK_JAAS`` and
``LEDGERGC_CONFIG_STORE_JAAS`` (issue 34). The
file is read (and refused) as the settings are made, before any server is reached, so no
server is needed: the ZooKeeper address is a closed port.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PASSWORD = "Pw-0f-the-b00kie"
MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


def client(*lines: str) -> str:
    """A JAAS file whose Client section holds ``lines``, each on its own line (line 2 on)."""
    return "Client {\n" + "".join(f"  {line}\n" for line in lines) + "};\n"


#: Each slip: the file's text, and what the message must say of where and what.
SLIPS = {
    "no equals sign": (
        client(f"{MODULE} required", 'username="bookkeeper"', f'password "{PASSWORD}";'),
        ["line 4, column 12", "'=' expected", "a quoted value"],
    ),
    "a colon for the equals sign": (
        client(f"{MODULE} required", 'username="bookkeeper"', f'password: "{PASSWORD}";'),
        ["line 4, column 13", "'=' expected", "a quoted value"],
    ),
    "a missing key": (
        client(f"{MODULE} required", 'username="bookkeeper"', f'"{PASSWORD}";'),
        ["line 4, column 3", "an option name expected", "a quoted value"],
    ),
    "a bare value without equals sign": (
        client(f"{MODULE} required", "username=bookkeeper", f"password {PASSWORD};"),
        ["line 4, column 12", "'=' expected", "a word"],
    ),
    "a value where the flag goes": (
        client(f'{MODULE} "{PASSWORD}";'),
        ["line 2, column", "a login module flag expected", "a quoted value"],
    ),
    "a password for the flag": (
        client(f"{MODULE} {PASSWORD};"),
        ["line 2, column", "not a login module flag", "required"],
    ),
}


def ledgergc(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledger_gc.cli", *args],
        env={
            "PATH": "/usr/bin:/bin",
            "LEDGERGC_ZK_HOSTS": "127.0.0.1:1",
            "LEDGERGC_BUCKET": "",
            "LEDGERGC_STATE_DIR": str(tmp_path / "state"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    "setting", ["LEDGERGC_ZK_JAAS", "LEDGERGC_BK_ZK_JAAS", "LEDGERGC_CONFIG_STORE_JAAS"]
)
@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_slip_in_a_jaas_file_names_the_token_kind_and_position_never_its_text(
    tmp_path: Path, setting: str, slip: str
) -> None:
    text, words = SLIPS[slip]
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(text)
    env = {setting: str(jaas)}

    plain = ledgergc(tmp_path, env, "status")
    scripted = ledgergc(tmp_path, env, "status", "--json")

    assert plain.returncode == 2 and scripted.returncode == 2, plain.stderr
    error = json.loads(scripted.stdout)["error"]
    for shown in (plain.stdout, plain.stderr, scripted.stdout, scripted.stderr):
        assert PASSWORD not in shown, shown
        assert PASSWORD[3:-3] not in shown, shown
    line = plain.stderr.strip()
    assert "\n" not in line and line == f"ledgergc: error: {error}"
    assert f"{setting}={jaas}" in error, error
    for word in words:
        assert word in error, error
