"""A bad setting of BookKeeper's ensemble offers a fix in BookKeeper's own variables
(DESIGN.md: errors about BookKeeper's ensemble name ``LEDGERGC_BK_ZK_*``; issue 33's
review). Its unset parts fall back to Pulsar's, but setting Pulsar's variable to fix
BookKeeper's ensemble turns TLS or SASL on (or off) for Pulsar's as well."""

from __future__ import annotations

import pytest

from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError


@pytest.mark.parametrize(
    ("environ", "fix", "not_offered"),
    [
        (
            {"LEDGERGC_BK_ZK_TLS_CA": "/etc/ssl/ca.pem"},
            "set LEDGERGC_BK_ZK_TLS=true",
            "set LEDGERGC_ZK_TLS=true",
        ),
        (
            {"LEDGERGC_BK_ZK_TLS": "true", "LEDGERGC_BK_ZK_TLS_KEY": "/etc/ssl/key.pem"},
            "set both (LEDGERGC_BK_ZK_TLS_CERT and LEDGERGC_BK_ZK_TLS_KEY",
            "set both (LEDGERGC_ZK_TLS_CERT",
        ),
        (
            {"LEDGERGC_BK_ZK_SASL_USERNAME": "bookkeeper"},
            "set LEDGERGC_BK_ZK_SASL_MECHANISM to DIGEST-MD5",
            "set LEDGERGC_ZK_SASL_MECHANISM to",
        ),
        (
            {"LEDGERGC_BK_ZK_SASL_MECHANISM": "DIGEST-MD5", "LEDGERGC_BK_ZK_SASL_USERNAME": "bk"},
            "needs LEDGERGC_BK_ZK_SASL_PASSWORD (or LEDGERGC_BK_ZK_JAAS",
            "needs LEDGERGC_ZK_SASL_PASSWORD",
        ),
    ],
)
def test_a_bookkeeper_setting_error_offers_bookkeepers_own_variable(
    environ: dict[str, str], fix: str, not_offered: str
) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"LEDGERGC_ZK_HOSTS": "127.0.0.1:2181", **environ})
    message = str(err.value)
    assert fix in message and not_offered not in message, message


def test_an_ensembles_security_settings_print_no_secret() -> None:
    """Issue 33's review: ``Settings`` prints no secret, but its ensembles' TLS and SASL
    part printed the SASL password, the stores' passwords and an inline PEM key (an
    exception's args, a debugger, a test's failure report show a repr)."""
    from ledger_gc.config.zk_security import ZkSecurity

    security = ZkSecurity(
        tls_key="-----BEGIN PRIVATE KEY-----\nMIIEvQSeKrit-0\n-----END PRIVATE KEY-----",
        tls_keystore_password="SeKrit-1",
        tls_truststore_password="SeKrit-2",
        sasl_mechanism="DIGEST-MD5",
        sasl_username="bookkeeper",
        sasl_password="SeKrit-3",
    )
    assert "SeKrit" not in repr(security) and "bookkeeper" in repr(security), repr(security)
