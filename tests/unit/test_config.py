import pytest

from solaris_lib.config import load_settings, settings_env
from solaris_lib.errors import ConfigError


def test_defaults_work_on_this_machine(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in ("SOLARIS_DATA_ROOT", "SOLARIS_MODEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert settings.data_root == str(tmp_path / "var" / "data")
    assert settings.models_root == f"{settings.data_root}/models"
    assert settings.spark_master.startswith("local")


def test_environment_and_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("SOLARIS_DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("SOLARIS_REDIS_URL", "redis://example:6380/3")
    settings = load_settings(redis_key_prefix="other")
    assert settings.data_root == str(tmp_path)
    assert settings.redis_url == "redis://example:6380/3"
    assert settings.redis_key_prefix == "other"
    assert settings_env(settings)["SOLARIS_REDIS_KEY_PREFIX"] == "other"


def test_uri_data_roots_are_kept_verbatim(monkeypatch):
    monkeypatch.setenv("SOLARIS_DATA_ROOT", "hdfs://namenode:8020/solaris")
    assert load_settings().data_root == "hdfs://namenode:8020/solaris"


@pytest.mark.parametrize("root", ["s3a://bucket/solaris", "S3://bucket/x", "gs://bucket/x"])
def test_object_store_roots_are_refused_with_the_reason(monkeypatch, root):
    monkeypatch.setenv("SOLARIS_DATA_ROOT", root)
    with pytest.raises(ConfigError, match="object store.*renaming its staging directory"):
        load_settings()


def test_unknown_variables_are_rejected_by_name(monkeypatch):
    monkeypatch.setenv("SOLARIS_REDIS_ULR", "redis://typo")
    with pytest.raises(ConfigError, match="SOLARIS_REDIS_ULR"):
        load_settings()


def test_bad_values_name_the_field(monkeypatch):
    monkeypatch.setenv("SOLARIS_REDIS_KEY_PREFIX", "has space")
    with pytest.raises(ConfigError, match="redis_key_prefix"):
        load_settings()


def test_the_local_airflow_pool_takes_its_slots_from_the_settings(monkeypatch, tmp_path):
    from solaris_lib.devtools.airflow_services import from_settings

    monkeypatch.setenv("SOLARIS_DATA_ROOT", str(tmp_path))
    assert from_settings().spark_slots == 2
    monkeypatch.setenv("SOLARIS_AIRFLOW_SPARK_SLOTS", "1")
    assert from_settings().spark_slots == 1
    monkeypatch.setenv("SOLARIS_AIRFLOW_SPARK_SLOTS", "0")
    with pytest.raises(ConfigError, match="airflow_spark_slots"):
        from_settings()


def test_every_setting_is_documented_with_its_default():
    """docs/configuration.md's table has a row for every ``SOLARIS_*`` setting and for no other,
    each with its default where the default is a plain value (a new setting without a row, or a
    row left behind by a removed one, fails here)."""
    import re
    from pathlib import Path

    from solaris_lib.config import SolarisSettings

    table = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = dict(re.findall(r"^\| `(SOLARIS_[A-Z0-9_]+)` \| ([^|]*) \|", table, re.MULTILINE))
    settings = {f"SOLARIS_{name.upper()}" for name in SolarisSettings.model_fields}
    assert set(rows) - settings == set(), "rows for settings that do not exist"
    for name, field in SolarisSettings.model_fields.items():
        variable = f"SOLARIS_{name.upper()}"
        assert variable in rows, f"{variable} has no row in docs/configuration.md"
        if isinstance(field.default, int | float | str) and "," not in str(field.default):
            assert f"`{field.default}`" in rows[variable], (variable, field.default, rows[variable])
