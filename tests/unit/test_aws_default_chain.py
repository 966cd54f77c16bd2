"""The `ledgergc` command without Airflow: boto3's own default chain finds the identity.

No key in the settings means no key given to boto3, so its chain applies in each process
that builds a client: the environment, a profile (one that assumes a role too), web
identity (IRSA's ``AWS_ROLE_ARN`` and ``AWS_WEB_IDENTITY_TOKEN_FILE``), the instance
profile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger_gc.config.edge import block_store
from ledger_gc.config.settings import Settings
from ledger_gc.storage.s3_bucket import build_client


def test_without_keys_in_the_settings_boto3s_chain_finds_a_profile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[ledgergc]\naws_access_key_id = AKIAPROFILEKEY\naws_secret_access_key = from-profile\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "ledgergc")
    settings = Settings.from_env({})
    assert settings.s3_access_key_id is None
    found = build_client(block_store(settings))._request_signer._credentials
    assert (found.access_key, found.secret_key) == ("AKIAPROFILEKEY", "from-profile")
    # Keys in the settings (the environment's, a connection's) are used as they are.
    given = Settings.from_env({"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "s"})
    assert build_client(block_store(given))._request_signer._credentials.access_key == "AKIAENV"
