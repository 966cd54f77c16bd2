"""Which store Pulsar offloaded to, and which one ledger-gc is configured for: Pulsar's
driver strings and a ledger's ``driverMetadata`` (pure), the settings that name the
driver, endpoint and credentials (``LEDGERGC_OFFLOAD_DRIVER``, broker.conf), and the
edge that resolves them into ``ObjectStore.driver`` and its credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger_gc.config.broker_conf import settings_of
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError
from ledger_gc.rules.bookkeeper import offloaded_copy as oc
from ledger_gc.rules.bookkeeper.offloaded_copy import OffloadedCopy
from ledger_gc.rules.storage.offload_drivers import (
    AZURE,
    GCS,
    S3,
    family,
    offload_target,
)


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("aws-s3", S3),
        ("AWS-S3", S3),
        ("S3", S3),
        ("aliyun-oss", S3),
        ("google-cloud-storage", GCS),
        ("Google-Cloud-Storage", GCS),
        ("azureblob", AZURE),
        ("AzureBlob", AZURE),
        ("filesystem", None),
        ("transient", None),
        ("", None),
        (None, None),
    ],
)
def test_pulsars_driver_strings_name_a_family(driver: str | None, expected: str | None) -> None:
    assert family(driver) == expected


def test_driver_metadata_names_the_family_and_bucket_of_the_copy() -> None:
    target = offload_target(
        "google-cloud-storage",
        {
            "managedLedgerOffloadDriver": "google-cloud-storage",
            "bucket": "g-offload",
            "region": "",
            "serviceEndpoint": "http://127.0.0.1:4443",
        },
    )
    assert (target.family, target.bucket, target.endpoint) == (
        GCS,
        "g-offload",
        "http://127.0.0.1:4443",
    )
    assert target.region is None  # blank: not recorded
    # No name (an older broker left it empty): the property says the driver.
    assert offload_target("", {"managedLedgerOffloadDriver": "azureblob"}).family == AZURE
    # Brokers before 2.6 wrote "endpoint".
    assert offload_target("S3", {"endpoint": "http://s3:9000"}).endpoint == "http://s3:9000"
    assert offload_target(None, {}).family is None


@pytest.mark.parametrize(
    ("configured", "copy", "expected"),
    [
        # A ledger offloaded to GCS while ledger-gc is configured for S3, and the other way.
        (S3, OffloadedCopy("u", driver="google-cloud-storage", bucket="b"), "google-cloud-storage"),
        (GCS, OffloadedCopy("u", driver="aws-s3", bucket="b"), "aws-s3"),
        (
            AZURE,
            OffloadedCopy("u", driver="google-cloud-storage", bucket="b"),
            "LEDGERGC_OFFLOAD_DRIVER",
        ),
        (GCS, OffloadedCopy("u", driver="filesystem"), "filesystem"),
        (GCS, OffloadedCopy("u", driver="google-cloud-storage", bucket="other"), "other"),
        (AZURE, OffloadedCopy("u", driver=None), "not recorded"),
    ],
)
def test_a_copy_of_another_family_or_bucket_is_held(
    configured: str, copy: OffloadedCopy, expected: str
) -> None:
    why = oc.why_unverifiable(copy, "b", family=configured)
    assert why is not None and expected in why and why.endswith("held"), why


@pytest.mark.parametrize(
    ("configured", "driver"),
    [(S3, "aws-s3"), (S3, "S3"), (GCS, "google-cloud-storage"), (AZURE, "azureblob")],
)
def test_a_copy_of_the_configured_family_and_bucket_can_be_checked(
    configured: str, driver: str
) -> None:
    copy = OffloadedCopy("u", driver=driver, bucket="b")
    assert oc.why_unverifiable(copy, "b", family=configured) is None


# --- settings and broker.conf -------------------------------------------------------


def test_the_driver_setting_takes_pulsars_strings_and_refuses_others() -> None:
    assert Settings.from_env(
        {"LEDGERGC_OFFLOAD_DRIVER": "google-cloud-storage"}
    ).offload_driver == ("google-cloud-storage")
    assert Settings().offload_driver == "aws-s3"
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({"LEDGERGC_OFFLOAD_DRIVER": "filesystem"})
    message = str(raised.value)
    assert "LEDGERGC_OFFLOAD_DRIVER='filesystem'" in message and "azureblob" in message
    assert "\n" not in message


def test_the_endpoint_setting_and_its_old_name() -> None:
    new = Settings.from_env({"LEDGERGC_OFFLOAD_ENDPOINT": "http://127.0.0.1:4443"})
    old = Settings.from_env({"LEDGERGC_OFFLOAD_S3_ENDPOINT": "http://127.0.0.1:8333"})
    both = Settings.from_env(
        {
            "LEDGERGC_OFFLOAD_ENDPOINT": "http://new:1",
            "LEDGERGC_OFFLOAD_S3_ENDPOINT": "http://old:2",
        }
    )
    assert new.offload_endpoint == "http://127.0.0.1:4443"
    assert old.offload_endpoint == "http://127.0.0.1:8333"
    assert both.offload_endpoint == "http://new:1"  # the new name wins
    # A child process gets it under the new name.
    assert old.to_env()["LEDGERGC_OFFLOAD_ENDPOINT"] == "http://127.0.0.1:8333"
    # The ledgergc_settings variable and a run's params: both keys.
    assert Settings().with_values(
        {"offload_s3_endpoint": "http://a:1"}, source="v"
    ).offload_endpoint == ("http://a:1")
    assert Settings().with_values(
        {"offload_endpoint": "http://b:1"}, source="v"
    ).offload_endpoint == ("http://b:1")


def _values(properties: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {found.env: (found.value, found.key) for found in settings_of(properties)}


def test_broker_conf_names_a_gcs_offload_its_bucket_and_key_file() -> None:
    conf = {
        "managedLedgerOffloadDriver": "google-cloud-storage",
        "gcsManagedLedgerOffloadBucket": "g-old",
        "managedLedgerOffloadBucket": "g-new",
        "gcsManagedLedgerOffloadRegion": "europe-west3",
        "gcsManagedLedgerOffloadServiceAccountKeyFile": "/pulsar/conf/gcs.json",
        "managedLedgerOffloadServiceEndpoint": "http://127.0.0.1:4443",
    }
    # The region is S3's: a GCS region names no endpoint ledger-gc would use.
    assert _values(conf) == {
        "LEDGERGC_OFFLOAD_DRIVER": ("google-cloud-storage", "managedLedgerOffloadDriver"),
        "LEDGERGC_OFFLOAD_BUCKET": ("g-old", "gcsManagedLedgerOffloadBucket"),
        "LEDGERGC_OFFLOAD_ENDPOINT": (
            "http://127.0.0.1:4443",
            "managedLedgerOffloadServiceEndpoint",
        ),
        "LEDGERGC_OFFLOAD_GCS_KEY_FILE": (
            "/pulsar/conf/gcs.json",
            "gcsManagedLedgerOffloadServiceAccountKeyFile",
        ),
    }


def test_broker_conf_names_an_azure_offload_its_container() -> None:
    conf = {
        "managedLedgerOffloadDriver": "azureblob",
        "managedLedgerOffloadBucket": "container",
        "gcsManagedLedgerOffloadBucket": "not-this",
    }
    assert _values(conf) == {
        "LEDGERGC_OFFLOAD_DRIVER": ("azureblob", "managedLedgerOffloadDriver"),
        "LEDGERGC_OFFLOAD_BUCKET": ("container", "managedLedgerOffloadBucket"),
    }


def test_broker_conf_with_a_driver_ledger_gc_does_not_read_turns_tiered_storage_off() -> None:
    [value] = settings_of({"managedLedgerOffloadDriver": "filesystem"})
    assert (value.env, value.value) == ("LEDGERGC_OFFLOAD_BUCKET", "")
    assert "filesystem" in value.why


def test_a_broker_conf_gcs_offload_becomes_the_settings(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "managedLedgerOffloadDriver=google-cloud-storage\n"
        "gcsManagedLedgerOffloadBucket=g-offload\n"
        "gcsManagedLedgerOffloadServiceAccountKeyFile=/etc/gcs.json\n"
    )
    settings = Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf)})
    assert (settings.offload_driver, settings.offload_bucket) == (
        "google-cloud-storage",
        "g-offload",
    )
    assert settings.offload_gcs_key_file == Path("/etc/gcs.json")


# --- the edge -----------------------------------------------------------------------


def test_the_edge_names_the_driver_family_and_keeps_s3s_endpoint_to_s3() -> None:
    base = Settings(
        s3_endpoint="http://s3.local:8333",
        s3_access_key_id="AKID",
        s3_secret_access_key="s3-secret",
        offload_bucket="offload",
    )
    assert resolve(base).offload.driver == S3
    gcs = resolve(
        base.with_overrides(offload_driver="google-cloud-storage", offload_gcs_token="ya29.tok")
    ).offload
    assert gcs.driver == GCS and gcs.gcs_token == "ya29.tok"
    # The block store's S3 endpoint and keys are no GCS endpoint or credential.
    assert gcs.endpoint is None and gcs.secret_access_key is None and gcs.access_key_id is None
    own = resolve(
        base.with_overrides(offload_driver="gcs", offload_endpoint="http://127.0.0.1:4443")
    ).offload
    assert own.endpoint == "http://127.0.0.1:4443"


def test_the_edge_gives_azure_its_account_and_credentials() -> None:
    settings = Settings(
        offload_bucket="container",
        offload_driver="azureblob",
        azure_storage_account="acct",
        azure_storage_key="azure-key-secret",
        s3_secret_access_key="s3-secret",
    )
    offload = resolve(settings).offload
    assert (offload.driver, offload.azure_account, offload.azure_key) == (
        AZURE,
        "acct",
        "azure-key-secret",
    )
    assert offload.secret_access_key is None
    assert "azure-key-secret" not in repr(offload)
    sas = resolve(
        Settings(
            offload_bucket="offload", offload_driver="azureblob", azure_storage_sas="sv=x&sig=y"
        )
    ).offload
    assert sas.azure_sas == "sv=x&sig=y"


def test_the_pulsar_azure_variables_are_read() -> None:
    settings = Settings.from_env(
        {
            "LEDGERGC_OFFLOAD_DRIVER": "azureblob",
            "LEDGERGC_OFFLOAD_BUCKET": "offload",
            "AZURE_STORAGE_ACCOUNT": "acct",
            "AZURE_STORAGE_ACCESS_KEY": "azure-key-secret",
        }
    )
    assert (settings.azure_storage_account, settings.azure_storage_key) == (
        "acct",
        "azure-key-secret",
    )
    assert "azure-key-secret" in settings.secrets()
    assert "AZURE_STORAGE_ACCESS_KEY" in settings.secret_settings()


def test_a_connection_strings_key_and_sas_are_masked_on_their_own() -> None:
    from ledger_gc.config.secret_values import secret_values

    connection = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        "AccountKey=conn-account-key==;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
    )
    settings = Settings(
        offload_bucket="offload",
        offload_driver="azureblob",
        azure_storage_connection_string=connection,
    )
    assert "conn-account-key==" in secret_values(settings)
    assert "conn-account-key==" in resolve(settings).offload.secrets()
    assert "conn-account-key" not in repr(resolve(settings))


@pytest.mark.parametrize(
    ("variable", "url", "secret"),
    [
        # An account key (or an S3 secret) as the URL's password.
        ("LEDGERGC_OFFLOAD_ENDPOINT", "https://acct:S3CR3TKEY@acct.blob.example", "S3CR3TKEY"),
        # An Azure account URL with a SAS in its query, as the portal hands one out.
        (
            "LEDGERGC_OFFLOAD_ENDPOINT",
            "https://acct.blob.core.windows.net/?sv=2022-11-02&sig=SASSIGNATURE",
            "SASSIGNATURE",
        ),
        ("LEDGERGC_S3_ENDPOINT", "http://AKIA:S3CR3TKEY@127.0.0.1:9000", "S3CR3TKEY"),
        # Refused for its scheme: the error must not echo the password either.
        ("LEDGERGC_OFFLOAD_ENDPOINT", "htps://user:S3CR3TKEY@host", "S3CR3TKEY"),
    ],
)
def test_an_endpoint_carrying_credentials_is_refused_without_showing_them(
    variable: str, url: str, secret: str
) -> None:
    """An endpoint is no secret setting: ``status`` shows it, errors and logs name it. So
    a password or a SAS written into it is refused, in one line that does not show it,
    and the fix is named: the credential settings."""
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({variable: url})
    message = str(raised.value)
    assert variable in message and "\n" not in message
    assert secret not in message


def test_a_broker_conf_endpoint_carrying_credentials_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "managedLedgerOffloadDriver=azureblob\n"
        "managedLedgerOffloadBucket=c\n"
        "managedLedgerOffloadServiceEndpoint=https://a.blob.core.windows.net/?sig=SASSIG\n"
    )
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf)})
    assert "SASSIG" not in str(raised.value)
    assert "LEDGERGC_OFFLOAD_ENDPOINT" in str(raised.value)


def test_a_broker_conf_for_another_store_lends_the_explicit_driver_nothing(
    tmp_path: Path,
) -> None:
    """The environment says S3 (explicitly), the brokers' file says GCS: the environment
    wins, and the file's bucket, endpoint and key file, which are GCS's, are not read
    into an S3 store (an S3 client sent to fake-gcs-server, a GCS bucket name listed on
    S3); ``status`` says why they were not."""
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "managedLedgerOffloadDriver=google-cloud-storage\n"
        "gcsManagedLedgerOffloadBucket=gcs-offload\n"
        "managedLedgerOffloadServiceEndpoint=http://127.0.0.1:4443\n"
        "gcsManagedLedgerOffloadServiceAccountKeyFile=/etc/gcs.json\n"
        "clusterName=east\n"
    )
    settings = Settings.from_env(
        {"LEDGERGC_PULSAR_CONF": str(conf), "LEDGERGC_OFFLOAD_DRIVER": "aws-s3"}
    )
    assert settings.offload_driver == "aws-s3"
    assert settings.offload_bucket == ""  # tiered storage off: no S3 bucket is named
    assert settings.offload_endpoint is None
    assert settings.offload_gcs_key_file is None
    assert settings.pulsar_clusters == ("east",)  # the rest of the file still counts
    shown = settings.provenance()
    assert shown["LEDGERGC_OFFLOAD_DRIVER"]["source"] == "env"
    why = shown["LEDGERGC_OFFLOAD_DRIVER"]["from"]
    assert "managedLedgerOffloadDriver=google-cloud-storage" in why and str(conf) in why
    assert resolve(settings).offload.configured is False
    # Same family, other spelling: the file's keys are the store's and are read.
    same = Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf), "LEDGERGC_OFFLOAD_DRIVER": "gcs"})
    assert (same.offload_bucket, same.offload_endpoint) == (
        "gcs-offload",
        "http://127.0.0.1:4443",
    )
    # The bucket given explicitly with the other driver: still no endpoint of GCS's.
    mine = Settings.from_env(
        {
            "LEDGERGC_PULSAR_CONF": str(conf),
            "LEDGERGC_OFFLOAD_DRIVER": "azureblob",
            "LEDGERGC_OFFLOAD_BUCKET": "container",
        }
    )
    assert (mine.offload_bucket, mine.offload_endpoint) == ("container", None)


@pytest.mark.parametrize(
    ("family_name", "bucket", "refused"),
    [
        (AZURE, "pulsar-offload", False),
        (AZURE, "$root", False),
        (AZURE, "Pulsar_Offload", True),
        (AZURE, "ab", True),
        (AZURE, "a--b", True),
        (AZURE, "-offload", True),
        (AZURE, "x" * 64, True),
        (GCS, "pulsar_offload.example.com", False),
        (GCS, "pulsar-offload", False),
        (GCS, "-offload", True),
        (GCS, "Pulsar-Offload", True),
        (GCS, "ab", True),
        (GCS, "x" * 64, True),
        (S3, "Any_Name", False),  # S3's names are the setting's own check
        (AZURE, "", False),  # tiered storage off
    ],
)
def test_a_bucket_name_the_store_refuses_is_named_before_any_request(
    family_name: str, bucket: str, refused: bool
) -> None:
    from ledger_gc.rules.storage.offload_drivers import bucket_name_problem

    assert (bucket_name_problem(family_name, bucket) is not None) is refused


def test_a_driver_from_the_airflow_variable_drops_the_files_other_store_keys(
    tmp_path: Path,
) -> None:
    """In a task the environment's settings (the file's already read into them) come
    first, then the connections, the ledgergc_settings variable and the params, then the
    file again: a driver the variable sets to another store must not keep the file's
    bucket and endpoint that the first reading put there."""
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "managedLedgerOffloadDriver=google-cloud-storage\n"
        "gcsManagedLedgerOffloadBucket=gcs-offload\n"
        "managedLedgerOffloadServiceEndpoint=http://127.0.0.1:4443\n"
    )
    settings = (
        Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf)})
        .with_values({"offload_driver": "aws-s3"}, source="ledgergc_settings")
        .with_broker_conf()
    )
    assert settings.offload_driver == "aws-s3"
    assert (settings.offload_bucket, settings.offload_endpoint) == ("", None)
    shown = settings.provenance()
    assert shown["LEDGERGC_OFFLOAD_BUCKET"]["source"] == "default"
    assert "google-cloud-storage" in shown["LEDGERGC_OFFLOAD_DRIVER"]["from"]
