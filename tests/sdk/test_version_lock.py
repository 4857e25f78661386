"""Validated version combinations: driver requirements, certified stacks, lock files.

docs/operators/locks-and-upgrades.md and docs/operators/config.md (drivers, require_lock).  Start-up
runs in a fresh process each time (the runtime is per process), on a private copy
of the reference library whose metadata file each test writes, and whose driver
version FL_REFERENCE_DRIVER_VERSION sets.  Every refusal must name the field and
both values (required/locked/certified and running).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT
from test_certificate import synthetic_report

from fl_runtime.config import parse_config
from fl_runtime.errors import ConfigError, LockFileError
from fl_runtime.plugins import certification as cert
from fl_runtime.plugins import drivers, stack
from fl_runtime.plugins.metadata import (
    PluginMetadataError,
    metadata_path,
    read_metadata,
)
from fl_sdk import INCLUDE_DIR, certify
from fl_sdk.build import BuildError, build
from fl_sdk.plugin_meta import read_plugin_metadata

REFERENCE = ROOT / "reference_vendor" / "libfl_reference.so"
LOCK_FIELDS = ("torch", "torch_fl", "python", "os", "arch", "abi")
PLUGIN_FIELDS = ("version", "abi", "library", "sha256")


# -- set-up ---------------------------------------------------------------------
@pytest.fixture
def library(tmp_path: Path) -> Path:
    """A private copy of the reference library (its own metadata and certificate)."""
    if not REFERENCE.is_file():
        pytest.fail(f"{REFERENCE} is not built: python -m fl_sdk build reference_vendor")
    copy = tmp_path / "lib" / "libfl_reference.so"
    copy.parent.mkdir()
    shutil.copy2(REFERENCE, copy)
    return copy


def require(library: Path, minimum: str | None = "1.0", known_bad: list[str] | None = None) -> None:
    metadata_path(library).write_text(json.dumps({"format": "torch-fl-plugin-meta/1",
                                                  "driver": {"minimum": minimum, "known_bad": known_bad or []}}))


def env_for(library: Path, driver: str | None = None, config: Path | None = None) -> dict:
    env = {"TORCH_FL_DISABLE_ENTRY_POINTS": "1", "TORCH_FL_PLUGINS": str(library),
           "TORCH_FL_CONFIG": str(config) if config else ""}
    if driver is not None:
        env["FL_REFERENCE_DRIVER_VERSION"] = driver
    return env


def write_config(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(doc))
    return path


START = """
import json, torch_fl
print(json.dumps({"devices": [d["driver_version"] for d in torch_fl.list_devices()],
                  "why": torch_fl.why_no_devices()}))
"""

CLI = """
import sys
from fl_runtime.tools.cli import main
sys.exit(main({argv!r}))
"""


def start(python, env: dict) -> dict:
    result = python(START, env, timeout=180)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def cli(python, argv: list[str], env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return python(CLI.format(argv=argv), env, timeout=180, cwd=cwd)


def cli_json(python, argv: list[str], env: dict, cwd: Path | None = None) -> tuple[int, dict]:
    result = cli(python, [*argv, "--json"], env, cwd)
    assert result.returncode in (0, 1, 2), result.stderr
    return result.returncode, json.loads(result.stdout)


def doctor_check(python, env: dict, name: str) -> tuple[int, dict]:
    rc, doc = cli_json(python, ["doctor"], env)
    return rc, next(c for c in doc["checks"] if c["name"] == name)


# -- driver requirements: the rule itself -----------------------------------------
@pytest.mark.parametrize("running, code, said", [
    ("1.0.0", drivers.SUPPORTED, "meets"),
    ("1.10", drivers.SUPPORTED, "meets"),                   # PEP 440: 1.10 > 1.9, not a string compare
    ("0.9", drivers.BELOW_MINIMUM, "required >= 1.0, running 0.9"),
    ("1.4.0", drivers.KNOWN_BAD, "running 1.4.0"),
    ("1.4", drivers.KNOWN_BAD, "running 1.4"),              # 1.4 == 1.4.0
    ("rev-b7 (beta)", drivers.UNPARSABLE, "not a PEP 440 version"),
])
def test_driver_verdicts_compare_pep440_and_name_the_field_and_both_values(running, code, said):
    verdict = drivers.DriverRequirement("1.0", ("1.4.0",)).assess(running, "acme")
    assert verdict.code == code and verdict.supported == (code == drivers.SUPPORTED)
    assert said in verdict.reason
    if not verdict.supported:
        assert "driver_version" in verdict.reason and "acme" in verdict.reason


def test_no_requirement_accepts_any_driver_even_an_unparsable_one():
    verdict = drivers.DriverRequirement().assess("whatever", "acme")
    assert verdict.supported and verdict.code == drivers.NO_REQUIREMENT


@pytest.mark.parametrize("raw, said", [
    ({"minimum": "one point two"}, r"driver\.minimum 'one point two' is not a PEP 440"),
    ({"known_bad": ["1.4", "x.y"]}, r"driver\.known_bad\[1\] 'x\.y'"),
    ({"known_bad": "1.4"}, r"driver\.known_bad must be a list"),
    ({"minimun": "1.0"}, r"driver\.minimun"),
    ("1.0", r"'driver' must be a mapping"),
])
def test_a_malformed_requirement_is_refused_naming_the_key(raw, said):
    with pytest.raises(drivers.DriverRequirementError, match=said):
        drivers.DriverRequirement.from_mapping(raw, "plugin.yaml")


def test_metadata_file_is_read_and_a_broken_one_is_an_error_naming_it(library):
    assert read_metadata(library).driver.empty          # no file: the plugin states nothing
    require(library, "1.2", ["1.4.0"])
    assert read_metadata(library).driver == drivers.DriverRequirement("1.2", ("1.4.0",))
    metadata_path(library).write_text("{not json")
    with pytest.raises(PluginMetadataError, match=str(metadata_path(library))):
        read_metadata(library)


def test_the_reference_plugin_states_a_requirement_its_driver_meets():
    document = read_plugin_metadata(ROOT / "reference_vendor" / "plugin.yaml")
    assert document["format"] == "torch-fl-plugin-meta/1"
    stated = drivers.DriverRequirement.from_mapping(document["driver"], "plugin.yaml")
    assert stated.minimum == "1.0"
    assert read_metadata(REFERENCE).driver == stated          # fl-sdk build copied it beside the library
    assert stated.assess("1.0.0", "reference").supported


def _tiny_plugin(tmp_path: Path, driver: dict) -> Path:
    directory = tmp_path / "tiny"
    (directory / "src").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "fixtures" / "plugin_claims_major2.c", directory / "src" / "plugin.c")
    (directory / "plugin.yaml").write_text(json.dumps({"library": "libtiny.so", "sources": ["src/*.c"],
                                                       "driver": driver}))
    return directory


def test_fl_sdk_build_copies_the_requirement_beside_the_library(tmp_path):
    assert INCLUDE_DIR.is_dir()
    library = build(_tiny_plugin(tmp_path, {"minimum": "2.1", "known_bad": ["2.3.0"]}))
    assert read_metadata(library).driver == drivers.DriverRequirement("2.1", ("2.3.0",))
    bad = tmp_path / "bad"
    shutil.copytree(library.parent, bad)
    (bad / "plugin.yaml").write_text(json.dumps({"library": "libtiny.so", "sources": ["src/*.c"],
                                                 "driver": {"minimum": "2.x"}}))
    with pytest.raises(BuildError, match=r"driver\.minimum '2\.x'"):
        build(bad, force=True)


# -- driver requirements: start-up, doctor and the config override --------------------
def test_a_driver_below_the_minimum_is_left_out_and_doctor_says_why(python, library):
    require(library, "1.0")
    env = env_for(library, driver="0.9")
    started = start(python, env)
    assert started["devices"] == []
    assert "driver_version" in started["why"] and ">= 1.0" in started["why"] and "running 0.9" in started["why"]
    rc, driver = doctor_check(python, env, "driver")
    assert rc == 1 and driver["status"] == "fail"
    assert "left out" in driver["detail"] and "required >= 1.0, running 0.9" in driver["detail"]
    assert "drivers.allow_unsupported" in driver["next_step"]


def test_a_known_bad_driver_is_left_out(python, library):
    require(library, "1.0", ["1.0.0"])
    env = env_for(library)                                  # the reference's own 1.0.0
    assert start(python, env)["devices"] == []
    rc, driver = doctor_check(python, env, "driver")
    assert rc == 1 and driver["status"] == "fail" and "known to be broken" in driver["detail"]
    assert "running 1.0.0" in driver["detail"] and "not 1.0.0" in driver["detail"]


def test_an_unparsable_driver_version_is_left_out_with_a_clear_message(python, library):
    require(library, "1.0")
    env = env_for(library, driver="rev-b7 (beta)")
    started = start(python, env)
    assert started["devices"] == [] and "'rev-b7 (beta)' is not a PEP 440 version" in started["why"]
    rc, driver = doctor_check(python, env, "driver")
    assert rc == 1 and driver["status"] == "fail" and "running 'rev-b7 (beta)'" in driver["detail"]


def test_a_supported_driver_runs(python, library):
    require(library, "1.0", ["1.4.0"])
    assert start(python, env_for(library, driver="1.2"))["devices"] == ["1.2", "1.2"]


@pytest.mark.parametrize("allow", [True, ["reference"]])
def test_the_config_can_keep_devices_with_an_unsupported_driver(python, library, tmp_path, allow):
    require(library, "1.0")
    config = write_config(tmp_path, {"drivers": {"allow_unsupported": allow}})
    env = env_for(library, driver="0.9", config=config)
    assert start(python, env)["devices"] == ["0.9", "0.9"]
    rc, driver = doctor_check(python, env, "driver")
    assert rc == 0 and driver["status"] == "warn"
    assert "kept by drivers.allow_unsupported" in driver["detail"] and "running 0.9" in driver["detail"]


def test_allowing_another_device_type_does_not_keep_these(python, library, tmp_path):
    require(library, "1.0")
    config = write_config(tmp_path, {"drivers": {"allow_unsupported": ["acme"]}})
    assert start(python, env_for(library, driver="0.9", config=config))["devices"] == []


@pytest.mark.parametrize("raw, key", [
    ({"drivers": {"allow_unsupported": "yes"}}, "drivers.allow_unsupported"),
    ({"drivers": {"allow_unsupported": [3]}}, "drivers.allow_unsupported"),
    ({"drivers": {"allow": True}}, "drivers.allow"),
    ({"drivers": []}, "drivers"),
    ({"require_lock": 5}, "require_lock"),
    ({"require_lock": ""}, "require_lock"),
])
def test_new_config_keys_are_validated_naming_the_key(raw, key):
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        parse_config(raw)


def test_require_lock_is_relative_to_the_config_file(tmp_path):
    config = parse_config({"require_lock": "prod.lock"}, str(tmp_path / "config.yaml"))
    assert config.require_lock == str(tmp_path / "prod.lock")
    assert parse_config({}).require_lock is None and not parse_config({}).drivers.allows("reference")


# -- certified stacks ------------------------------------------------------------------
@pytest.fixture
def keys(tmp_path: Path) -> dict:
    private, public, _ = certify.generate_key(tmp_path / "certifier.key")
    return {"private": private, "public": public}


def issue(library: Path, keys: dict, stack_doc: dict | None) -> None:
    sha = cert.sha256_of(library)
    report = synthetic_report(sha, **({"stack": stack_doc} if stack_doc is not None else {}))
    certify.certify_report(report, library, sha, keys["private"], cert.default_certificate_path(library))


def stack_report(python, library: Path, keys: dict, tmp_path: Path, driver: str | None = None) -> dict:
    """What `devices --json` and doctor say of the certified stack, in a fresh process."""
    config = write_config(tmp_path, {"certification": {"trusted_keys": [str(keys["public"])]}})
    env = env_for(library, driver=driver, config=config)
    rc, devices = cli_json(python, ["devices"], env)
    assert rc == 0 and devices["devices"], devices
    _, check = doctor_check(python, env, "certified stack")
    table = cli(python, ["devices"], env).stdout
    return {"devices": devices["devices"][0], "doctor": check, "table": table}


def test_the_certificate_records_the_stack_the_cert_run_used(library):
    recorded = certify.library_stack(library)
    assert recorded["drivers"] == {"reference": "1.0.0"} and recorded["plugin_version"]
    assert set(recorded) == {"torch", "torch_fl", "abi", "plugin_version", "drivers", "os", "arch"}
    sha = cert.sha256_of(library)
    payload = certify.build_payload(synthetic_report(sha, stack=recorded), library, sha)
    assert payload["stack"] == recorded
    assert "stack" not in certify.build_payload(synthetic_report(sha), library, sha)


def test_a_stack_the_certificate_covers(python, library, keys, tmp_path):
    issue(library, keys, certify.library_stack(library))
    seen = stack_report(python, library, keys, tmp_path)
    assert seen["devices"]["certified"] is True
    assert seen["devices"]["certified_stack"]["state"] == "covered"
    assert seen["doctor"]["status"] == "ok" and "covered" in seen["doctor"]["detail"]
    assert "covered" in seen["table"]


def test_a_stack_the_certificate_does_not_cover_names_field_and_both_values(python, library, keys, tmp_path):
    recorded = certify.library_stack(library)
    issue(library, keys, dict(recorded, torch_fl="0.0.1", os="Plan9"))
    seen = stack_report(python, library, keys, tmp_path, driver="1.3")
    assert seen["devices"]["certified"] is True                 # still a valid certificate
    coverage = seen["devices"]["certified_stack"]
    assert coverage["state"] == "not_covered"
    by_field = {d["field"]: (d["certified"], d["running"]) for d in coverage["differences"]}
    assert by_field == {"torch_fl": ("0.0.1", recorded["torch_fl"]), "os": ("Plan9", recorded["os"]),
                        "drivers.reference": ("1.0.0", "1.3")}
    detail = seen["doctor"]["detail"]
    assert seen["doctor"]["status"] == "warn"
    assert "drivers.reference: certified '1.0.0', running '1.3'" in detail
    assert "os: certified 'Plan9', running" in detail
    assert "differs: torch_fl,drivers.reference,os" in seen["table"]


def test_an_old_certificate_without_a_stack_is_valid_but_stack_unknown(python, library, keys, tmp_path):
    issue(library, keys, None)
    seen = stack_report(python, library, keys, tmp_path)
    assert seen["devices"]["certified"] is True
    assert seen["devices"]["certified_stack"]["state"] == "stack_unknown"
    assert seen["doctor"]["status"] == "warn" and "stack unknown" in seen["doctor"]["detail"]


# -- lock files ------------------------------------------------------------------------
def test_lock_and_check_help(python):
    for command in ("lock", "check"):
        result = cli(python, [command, "--help"], {})
        assert result.returncode == 0 and "--json" in result.stdout and "FILE" in result.stdout.upper()


def test_a_lock_written_here_matches_here(python, library, tmp_path):
    require(library, "1.0")
    env = env_for(library)
    written = cli(python, ["lock"], env, cwd=tmp_path)           # default file name, in the cwd
    assert written.returncode == 0, written.stderr
    lock_file = tmp_path / "torch-fl.lock"
    doc = json.loads(lock_file.read_text())
    assert doc["format"] == stack.LOCK_FORMAT
    locked = doc["stack"]
    assert set(LOCK_FIELDS) <= set(locked) and list(locked["plugins"]) == ["reference"]
    plugin = locked["plugins"]["reference"]
    assert plugin["library"] == str(library) and plugin["sha256"] == cert.sha256_of(library)
    assert plugin["drivers"] == {"reference": "1.0.0"}
    rc, checked = cli_json(python, ["check", str(lock_file)], env)
    assert rc == 0 and checked["matches"] and checked["differences"] == []
    assert "matches" in cli(python, ["check", str(lock_file)], env).stdout
    rc, again = cli_json(python, ["lock", str(tmp_path / "second.lock")], env)
    assert rc == 0 and again["stack"] == locked and again["file"] == str(tmp_path / "second.lock")


def test_a_lock_that_differs_in_every_field_names_each_one(python, library, tmp_path):
    env = env_for(library)
    lock_file = tmp_path / "old.lock"
    assert cli(python, ["lock", str(lock_file)], env).returncode == 0
    doc = json.loads(lock_file.read_text())
    running = json.loads(json.dumps(doc["stack"]))
    for name in LOCK_FIELDS:
        doc["stack"][name] = f"locked-{name}"
    plugin = doc["stack"]["plugins"]["reference"]
    for name in PLUGIN_FIELDS:
        plugin[name] = f"locked-{name}"
    plugin["drivers"]["reference"] = "locked-driver"
    doc["stack"]["plugins"]["acme"] = {"version": "3.0", "drivers": {"acme": "7.1"}}
    lock_file.write_text(json.dumps(doc))
    rc, checked = cli_json(python, ["check", str(lock_file)], env)
    assert rc == 1 and not checked["matches"]
    found = {d["field"]: (d["locked"], d["running"]) for d in checked["differences"]}
    expected = {name: (f"locked-{name}", running[name]) for name in LOCK_FIELDS}
    expected.update({f"plugins.reference.{name}": (f"locked-{name}", running["plugins"]["reference"][name])
                     for name in PLUGIN_FIELDS})
    expected["plugins.reference.drivers.reference"] = ("locked-driver", "1.0.0")
    expected["plugins.acme"] = ({"version": "3.0", "drivers": {"acme": "7.1"}}, None)
    assert found == expected
    text = cli(python, ["check", str(lock_file)], env)
    assert text.returncode == 1
    for name, (locked, now) in expected.items():
        if isinstance(now, str):
            assert f"{name}: locked {locked!r}, running {now!r}" in text.stdout
    assert "plugins.acme: locked {" in text.stdout and "running (absent)" in text.stdout


def test_a_driver_upgrade_after_locking_is_the_one_difference(python, library, tmp_path):
    lock_file = tmp_path / "torch-fl.lock"
    assert cli(python, ["lock", str(lock_file)], env_for(library)).returncode == 0
    rc, checked = cli_json(python, ["check", str(lock_file)], env_for(library, driver="1.1"))
    assert rc == 1
    assert checked["differences"] == [{"field": "plugins.reference.drivers.reference",
                                       "locked": "1.0.0", "running": "1.1"}]


def test_check_of_a_missing_or_foreign_file_exits_2(python, library, tmp_path):
    rc, checked = cli_json(python, ["check", str(tmp_path / "nope.lock")], env_for(library))
    assert rc == 2 and "does not exist" in checked["error"]
    (tmp_path / "foreign.lock").write_text("{}")
    with pytest.raises(LockFileError, match="is not a torch-fl-lock/1 file"):
        stack.read_lock(tmp_path / "foreign.lock")


def test_require_lock_refuses_to_start_naming_every_difference(python, library, tmp_path):
    lock_file = tmp_path / "prod.lock"
    assert cli(python, ["lock", str(lock_file)], env_for(library)).returncode == 0
    config = write_config(tmp_path, {"require_lock": str(lock_file)})
    assert start(python, env_for(library, config=config))["devices"] == ["1.0.0", "1.0.0"]

    doc = json.loads(lock_file.read_text())
    doc["stack"]["torch"] = "2.12.0"
    lock_file.write_text(json.dumps(doc))
    refused = python("import torch_fl; torch_fl.list_devices()", env_for(library, driver="1.1", config=config),
                     timeout=180)
    assert refused.returncode != 0
    assert "LockMismatchError: refusing to start" in refused.stderr and "require_lock" in refused.stderr
    assert "torch: locked '2.12.0', running" in refused.stderr
    assert "plugins.reference.drivers.reference: locked '1.0.0', running '1.1'" in refused.stderr

    caught = python("""
import json, fl_runtime
try:
    import torch_fl                    # starts the runtime
except fl_runtime.LockMismatchError as exc:
    print(json.dumps({"path": exc.path, "differences": exc.differences,
                      "fl": isinstance(exc, fl_runtime.FLError)}))
""", env_for(library, config=config), timeout=180)
    assert caught.returncode == 0, caught.stderr
    refusal = json.loads(caught.stdout.strip().splitlines()[-1])
    assert refusal["fl"] and refusal["path"] == str(lock_file)
    assert [line.split(":")[0] for line in refusal["differences"]] == ["torch"]

    rc, lock_check = doctor_check(python, env_for(library, config=config), "lock")
    assert rc == 1 and lock_check["status"] == "fail" and "torch: locked '2.12.0'" in lock_check["detail"]


def test_require_lock_with_a_missing_file_refuses_to_start(python, library, tmp_path):
    config = write_config(tmp_path, {"require_lock": str(tmp_path / "missing.lock")})
    refused = python("import torch_fl; torch_fl.list_devices()", env_for(library, config=config), timeout=180)
    assert refused.returncode != 0 and "LockFileError" in refused.stderr and "missing.lock" in refused.stderr


def test_differences_are_computed_field_by_field():
    locked = {"torch": "2.13.0", "plugins": {"a": {"sha256": "x", "drivers": {"t": "1"}}}}
    running = {"torch": "2.13.0", "plugins": {"a": {"sha256": "y", "drivers": {"t": "1"}}, "b": {"sha256": "z"}}}
    assert [(d.field, d.expected, d.running) for d in stack.differences(locked, running)] == [
        ("plugins.a.sha256", "x", "y"), ("plugins.b", None, {"sha256": "z"})]
    assert stack.differences(locked, locked) == []


def test_a_plugin_stating_nothing_gets_no_metadata_file_and_a_stale_one_goes(tmp_path):
    directory = _tiny_plugin(tmp_path, {"minimum": "2.1"})
    library = build(directory)
    assert metadata_path(library).is_file()
    (directory / "plugin.yaml").write_text(json.dumps({"library": "libtiny.so", "sources": ["src/*.c"]}))
    build(directory, force=True)
    assert not metadata_path(library).exists() and read_metadata(library).driver.empty


def test_fl_sdk_certify_records_the_stack_of_its_own_run(library, keys, monkeypatch, capsys):
    from test_certificate import _fake_cert_run

    from fl_sdk.cli import main as fl_sdk_main
    _fake_cert_run(monkeypatch, synthetic_report("unused"), 0)
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"])]) == 0
    payload = cert.read_certificate(cert.default_certificate_path(library)).payload
    assert payload["stack"] == certify.library_stack(library)
    assert payload["stack"]["drivers"] == {"reference": "1.0.0"}


def test_two_libraries_claiming_one_plugin_name_both_appear_in_the_lock(python, library, tmp_path):
    second = tmp_path / "other" / "libfl_reference_b.so"
    second.parent.mkdir()
    shutil.copy2(library, second)
    env = dict(env_for(library), TORCH_FL_PLUGINS=f"{library}:{second}")
    rc, locked = cli_json(python, ["lock", str(tmp_path / "two.lock")], env)
    assert rc == 0 and sorted(locked["stack"]["plugins"]) == ["reference", f"reference ({second})"]


def test_fl_sdk_build_stays_torch_free_for_plugins_stating_nothing(python):
    from fl_runtime.plugins import metadata
    from fl_sdk import plugin_meta
    assert plugin_meta.SUFFIX == metadata.SUFFIX
    # A vendor's `pip install` builds through fl_sdk.build (vendor_template setup.py).
    result = python("import sys, fl_sdk.build; print('torch' in sys.modules)")
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stderr
