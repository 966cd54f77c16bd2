"""The ``ledgergc_settings`` Airflow variable's values, as JSON gives them, become
checked settings (issue 20: a quoted number used to reach the delete task as a string
and fail it with a TypeError, and its bounds were checked only for the environment)."""

from __future__ import annotations

import pytest

from ledger_gc.airflow.settings_hook import apply_mapping
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError


def test_quoted_numbers_and_flags_are_converted() -> None:
    settings = apply_mapping(
        Settings(),
        {
            "orphan_delete_spark_over": "1000",
            "orphan_lock_wait_seconds": "12.5",
            "grace_seconds": "60",
            "delete_enabled": "true",
            "bk_shared": "true",
            "bookkeeper": "false",
        },
    )
    assert settings.orphan_delete_spark_over == 1000
    assert settings.orphan_lock_wait_seconds == 12.5
    assert settings.grace_seconds == 60
    assert settings.delete_enabled and settings.bk_shared
    assert settings.bookkeeper == "false"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"orphan_delete_spark_over": "-1"}, "LEDGERGC_ORPHAN_DELETE_SPARK_OVER"),
        ({"orphan_lock_wait_seconds": -5}, "LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS"),
        ({"orphan_delete_spark_over": "many"}, "LEDGERGC_ORPHAN_DELETE_SPARK_OVER"),
        ({"bookkeeper": "maybe"}, "LEDGERGC_BOOKKEEPER"),
        ({"bk_ledgers_root": "ledgers"}, "LEDGERGC_BK_LEDGERS_ROOT"),
    ],
)
def test_a_bad_value_is_one_clear_error_naming_the_setting(values: dict, named: str) -> None:
    with pytest.raises(ConfigError) as error:
        apply_mapping(Settings(), values)
    assert named in str(error.value) and "\n" not in str(error.value)


def test_an_empty_bucket_in_the_environment_turns_the_block_store_off() -> None:
    off = Settings.from_env({"LEDGERGC_BUCKET": ""})
    assert off.bucket == "" and not off.block_store
    assert Settings.from_env({}).bucket == "ledger-gc"
    assert Settings.from_env(off.to_env()).bucket == ""
