"""the config file, validated, with errors that name the key."""
import pytest
import yaml
from hypothesis import given, strategies as st

from fl_runtime.config import Config, load_config, parse_config
from fl_runtime.errors import ConfigError

EXAMPLE = """
devices:
  - type: reference
    count: 2
    memory_fraction: 0.9
fallback:
  enable_cpu_fallback: true
  enable_generic_kernel: true
logging:
  level: info
  path: ~/.torch_fl/torch_fl.log
"""


def test_the_documented_example_parses(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(EXAMPLE)
    config = load_config(path)
    assert config.rule_for("reference").count == 2
    assert config.rule_for("reference").memory_fraction == 0.9
    assert config.fallback.enable_cpu_fallback and config.logging.level == "info"
    assert not config.logging.path.startswith("~")


def test_missing_default_file_means_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_FL_CONFIG", raising=False)
    assert load_config(tmp_path / "absent.yaml") == Config()


def test_missing_file_named_by_env_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FL_CONFIG", str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigError, match="TORCH_FL_CONFIG"):
        load_config()


@pytest.mark.parametrize("raw, key", [
    ({"devices": [{"type": "reference", "memory_fraction": 1.5}]}, "devices[0].memory_fraction"),
    ({"devices": [{"type": "reference", "count": -1}]}, "devices[0].count"),
    ({"devices": [{"count": 1}]}, "devices[0].type"),
    ({"devices": [{"type": "reference", "cuont": 1}]}, "devices[0].cuont"),
    ({"devices": "reference"}, "devices"),
    ({"fallback": {"enable_cpu_fallback": "yes"}}, "fallback.enable_cpu_fallback"),
    ({"logging": {"level": "loud"}}, "logging.level"),
    ({"loging": {}}, "loging"),
    ({"plugins": [3]}, "plugins[0]"),
])
def test_bad_values_name_their_key(raw, key):
    with pytest.raises(ConfigError) as info:
        parse_config(raw, "/etc/x.yaml")
    assert info.value.key == key
    assert f"'{key}'" in str(info.value) and "/etc/x.yaml" in str(info.value)


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match="did you mean 'devices'"):
        parse_config({"device": []})


def test_invalid_yaml_is_a_config_error(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("devices: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


@given(st.floats(allow_nan=False), st.one_of(st.none(), st.integers(-5, 20)))
def test_device_rule_accepts_exactly_the_valid_range(fraction, count):
    raw = {"devices": [{"type": "reference", "memory_fraction": fraction, "count": count}]}
    valid = 0 < fraction <= 1 and (count is None or count >= 0)
    if valid:
        rule = parse_config(yaml.safe_load(yaml.safe_dump(raw))).rule_for("reference")
        assert rule.memory_fraction == fraction and rule.count == count
    else:
        with pytest.raises(ConfigError):
            parse_config(raw)
