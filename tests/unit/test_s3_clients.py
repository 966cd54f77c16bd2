"""S3 clients share botocore's parsed service models, and nothing else.

Each client has a session of its own (boto3's default session is not safe to share
between threads), but parsing S3's model files for each of them cost about 0.1 s of CPU
a client, several times a cycle and in every Spark task (issue 33).
"""

from __future__ import annotations

from ledger_gc.config.edge import block_store
from ledger_gc.config.settings import Settings
from ledger_gc.storage.s3_bucket import build_client


def _settings(key: str, endpoint: str) -> Settings:
    return Settings.from_env(
        {
            "LEDGERGC_S3_ENDPOINT": endpoint,
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": f"secret-of-{key}",
        }
    )


def test_two_clients_share_the_parsed_model_and_keep_their_own_keys_and_endpoints() -> None:
    first = build_client(block_store(_settings("AKIAFIRST", "http://127.0.0.1:9001")))
    second = build_client(block_store(_settings("AKIASECOND", "http://127.0.0.1:9002")))

    assert (
        first.meta.service_model._service_description
        is second.meta.service_model._service_description
    )
    assert first._request_signer._credentials.access_key == "AKIAFIRST"
    assert second._request_signer._credentials.access_key == "AKIASECOND"
    assert first._request_signer._credentials.secret_key == "secret-of-AKIAFIRST"
    assert (first.meta.endpoint_url, second.meta.endpoint_url) == (
        "http://127.0.0.1:9001",
        "http://127.0.0.1:9002",
    )
