"""The config file, validated, with errors that name the key."""
import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import given, strategies as st

from fl_runtime.config import Config, load_config, parse_config
from fl_runtime.errors import ConfigError
from conftest import ROOT

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


# -- hostile files: every problem is a ConfigError naming the file or the key ----------------

def _refused(path, *fragments) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    assert str(path) in str(info.value)
    return info.value


def test_a_non_utf8_file_is_a_config_error(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"devices:\n  - type: r\xe9f\xff\n")
    assert _refused(path, "not UTF-8", "0xe9").key == "<file>"


def test_a_directory_is_a_config_error(tmp_path):
    _refused(tmp_path, "is a directory")


@pytest.mark.parametrize("text", ["[" * 50_000 + "]" * 50_000, "- " * 50_000 + "1",
                                  "a:\n" + "".join(" " * i + "- \n" for i in range(1, 3000))])
def test_absurdly_deep_yaml_is_a_config_error(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    _refused(path)


def test_deep_yaml_with_the_pure_python_loader_is_a_config_error(tmp_path, monkeypatch):
    """Without libyaml, PyYAML's composer recurses per level: a RecursionError becomes a ConfigError."""
    import fl_runtime.config as config
    monkeypatch.setattr(config, "_SafeLoader", yaml.SafeLoader)
    path = tmp_path / "config.yaml"
    path.write_text("[" * 50_000 + "]" * 50_000)
    _refused(path, "nested too deeply")


def test_libyaml_loader_is_used_when_present():
    import fl_runtime.config as config
    assert config._SafeLoader is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


def test_many_device_rules_are_checked_in_linear_time():
    """The duplicate check was quadratic (40k entries took ~40 s).  Counted, not timed (a loaded
    machine makes wall-clock bounds flaky): each type name counts how often it is hashed and
    compared; a linear check hashes each about once and compares almost never."""
    calls = {"hash": 0, "eq": 0}

    class CountingName(str):
        def __hash__(self) -> int:
            calls["hash"] += 1
            return super().__hash__()

        def __eq__(self, other: object) -> bool:
            calls["eq"] += 1
            return super().__eq__(other)

    rules = [{"type": CountingName(f"t{i}"), "count": 1} for i in range(40_000)]
    config = parse_config({"devices": rules})
    assert len(config.devices) == 40_000
    assert calls["hash"] + calls["eq"] < 4 * 40_000, calls   # quadratic would be ~8e8 comparisons
    assert calls["hash"] + calls["eq"] >= 40_000, "the names were copied: this test no longer sees the check"
    with pytest.raises(ConfigError, match="type 't7' is listed more than once"):
        parse_config({"devices": rules + [{"type": "t7"}]})


@pytest.mark.parametrize("name", ["mm.__doc__", "mm.__class__", "add.nonexistent", "not_an_op", "mm.Tensor.x"])
def test_per_op_names_must_be_aten_overloads(name):
    with pytest.raises(ConfigError, match="is not an ATen operator") as info:
        parse_config({"kernels": {"per_op": {name: "fast"}}})
    assert info.value.key == f"kernels.per_op.{name}"


def test_per_op_accepts_real_overloads():
    config = parse_config({"kernels": {"per_op": {"aten::mm": "fast", "add.Tensor": "precise"}}})
    assert config.kernels.variant_for("mm") == "fast" and config.kernels.variant_for("add.Tensor") == "precise"


@pytest.mark.parametrize("where", ["directory", "under_a_file", "unwritable"])
def test_a_bad_logging_path_is_a_config_error_naming_the_key(tmp_path, monkeypatch, where):
    import logging
    from fl_runtime.config import LoggingConfig
    from fl_runtime.logs import configure_logging, logger
    # configure_logging adds a file handler only when the logger has none: hide any this
    # process already has (restored, with the level, when the test ends)
    monkeypatch.setattr(logger, "handlers", [h for h in logger.handlers if not isinstance(h, logging.FileHandler)])
    monkeypatch.setattr(logger, "level", logger.level)
    (tmp_path / "file").write_text("x")
    path = {"directory": str(tmp_path),
            "under_a_file": str(tmp_path / "file" / "torch_fl.log"),
            "unwritable": "/proc/torch_fl_cannot_write_here/torch_fl.log"}[where]   # refused even for root
    with pytest.raises(ConfigError) as info:
        configure_logging(LoggingConfig(level="warning", path=path), "/etc/my-config.yaml")
    assert info.value.key == "logging.path" and path in str(info.value)
    assert "/etc/my-config.yaml" in str(info.value)


@pytest.mark.parametrize("content", ["devices: 3\n", "logging:\n  path: /proc/no/such.log\n", None, b"\xff\xfe"])
def test_import_torch_under_warnings_as_errors_survives_a_bad_config(tmp_path, content):
    """`python -W error -c "import torch"` exits 0 and says what is wrong with the config."""
    path = tmp_path / "config.yaml"
    if content is None:
        path = tmp_path           # a directory
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    result = subprocess.run([sys.executable, "-W", "error", "-c", "import torch; print('imported')"],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "TORCH_FL_CONFIG": str(path)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "imported" in result.stdout
    assert "torch_fl could not start" in result.stderr and str(path) in result.stderr
    assert "Traceback" not in result.stderr
