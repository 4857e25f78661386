"""Conformance certificates: sign, verify, tamper -> rejected, and the runtime's switch.

Certificates are issued here from synthetic cert-profile reports (a real cert
run takes minutes; `fl-sdk certify reference --key KEY` is the manual check),
for a private copy of the reference library so a concurrent rebuild cannot
change the bytes under the test.
"""
from __future__ import annotations

import base64
import json
import shutil
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conformance import SUITE_VERSION
from conformance.profiles import PROFILES
from fl_runtime.plugins import certification as cert
from fl_runtime.config import parse_config
from fl_runtime.errors import ConfigError, PluginLoadError, UncertifiedPluginError
from fl_runtime.plugins.loader import PluginSource, load_plugin
from fl_sdk import certify
from fl_sdk.cli import main as fl_sdk_main

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "reference_vendor" / "libfl_reference.so"


def synthetic_report(sha256: str, profile: str = "cert", fail: int = 0, settings: dict | None = None,
                     **overrides) -> dict:
    """A report shaped like conformance.report's, for a run that passed unless `fail`
    (`settings` changes the profile's recorded settings)."""
    tests = [
        {"nodeid": "suite_abi.py::test_entry_symbol", "category": "abi", "op": None, "status": "pass"},
        {"nodeid": "suite_kernels.py::test_numerics[add-float32-precise]", "category": "kernels",
         "op": "add", "dtype": "float32", "variant": "precise", "status": "pass"},
        {"nodeid": "suite_kernels.py::test_numerics[add-float16-precise]", "category": "kernels",
         "op": "add", "dtype": "float16", "variant": "precise", "status": "pass"},
        {"nodeid": "suite_kernels.py::test_numerics[lerp-float32-precise]", "category": "kernels",
         "op": "lerp", "dtype": "float32", "variant": "precise", "status": "untested"},
        {"nodeid": "suite_robustness.py::test_malformed_launches[lerp-precise]", "category": "robustness",
         "op": "lerp", "variant": "precise", "status": "pass"},     # names an op, but is no numerics coverage
        {"nodeid": "suite_kernels.py::test_numerics[mul-int8-precise]", "category": "kernels",
         "op": "mul", "dtype": "int8", "variant": "precise", "status": "fail" if fail else "known_failure"},
    ]
    report = {
        "suite_version": SUITE_VERSION, "torch_version": cert.installed_torch_version(),
        "generated_at": "2026-01-01T00:00:00+00:00", "profile": {**vars(PROFILES[profile]), **(settings or {})},
        "seed": 0, "exit_status": 1 if fail else 0,
        "plugin": {"name": "reference", "vendor": "Torch-FL", "version": "0.1.0", "abi_version": "1.0",
                   "path": "/somewhere/libfl_reference.so", "sha256": sha256},
        "summary": {"total": 6, "pass": 4, "fail": fail, "not_supported": 0, "known_failure": 0 if fail else 1,
                    "untested": 1, "categories": {"abi": {"pass": 1}, "kernels": {"pass": 2}, "robustness": {"pass": 1}},
                    "untested_ops": ["lerp"]},
        "tests": tests,
    }
    report.update(overrides)
    return report


@pytest.fixture
def library(tmp_path: Path) -> Path:
    if not REFERENCE.is_file():
        pytest.fail(f"{REFERENCE} is not built: python -m fl_sdk build reference_vendor")
    copy = tmp_path / "lib" / "libfl_reference.so"
    copy.parent.mkdir()
    shutil.copy2(REFERENCE, copy)
    return copy


@pytest.fixture
def keys(tmp_path: Path) -> dict:
    private, public, kid = certify.generate_key(tmp_path / "certifier.key")
    return {"private": private, "public": public, "id": kid, "trusted": cert.trust_store([str(public)])}


def issue(library: Path, key_path: Path, passphrase: bytes | None = None, **report_overrides) -> Path:
    """Sign a certificate for `library` at its conventional place."""
    sha = cert.sha256_of(library)
    return certify.certify_report(synthetic_report(sha, **report_overrides), library, sha, key_path,
                                  cert.default_certificate_path(library), passphrase)


def rewrite(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


# -- keys ----------------------------------------------------------------------
def test_keygen_writes_a_private_key_only_its_owner_can_read(keys):
    assert stat.S_IMODE(keys["private"].stat().st_mode) == 0o600
    assert cert.key_id(cert.load_public_key(keys["public"])) == keys["id"]
    with pytest.raises(certify.CertifyError, match="already exists"):
        certify.generate_key(keys["private"])


def test_a_private_key_readable_by_others_is_refused(keys):
    keys["private"].chmod(0o644)
    with pytest.raises(certify.CertifyError, match="chmod 600"):
        certify.load_private_key(keys["private"])


def test_raw_public_key_bytes_are_accepted(keys, tmp_path):
    raw = tmp_path / "raw.pub"
    public = cert.load_public_key(keys["public"])
    raw.write_bytes(public.public_bytes_raw())
    assert cert.key_id(cert.load_public_key(raw)) == keys["id"]
    (tmp_path / "junk.pub").write_text("not a key")
    with pytest.raises(ConfigError, match=r"certification.trusted_keys\[0\].*junk.pub"):
        cert.trust_store([str(tmp_path / "junk.pub")])


def test_an_encrypted_key_needs_its_passphrase(tmp_path, library):
    private, public, _ = certify.generate_key(tmp_path / "locked.key", passphrase=b"correct horse")
    assert b"ENCRYPTED PRIVATE KEY" in private.read_bytes() and certify.key_is_encrypted(private)
    with pytest.raises(certify.CertifyError, match="is encrypted: give its passphrase with --passphrase-file"):
        certify.load_private_key(private)
    with pytest.raises(certify.CertifyError, match="wrong passphrase"):
        certify.load_private_key(private, b"battery staple")
    out = issue(library, private, b"correct horse")
    status = cert.verify_certificate(out, library, cert.trust_store([str(public)]))
    assert status.certified, status.reason


# -- payload -------------------------------------------------------------------
def test_payload_binds_hash_versions_coverage_and_results(library):
    sha = cert.sha256_of(library)
    payload = certify.build_payload(synthetic_report(sha), library, sha)
    assert payload["plugin"]["sha256"] == sha and payload["plugin"]["file"] == library.name
    assert (payload["abi_version"], payload["suite_version"]) == ("1.0", SUITE_VERSION)
    assert payload["torch_version"] == cert.installed_torch_version()
    assert payload["coverage"] == {"ops": {"add": ["float16/precise", "float32/precise"]},
                                   "untested_ops": ["lerp"]}
    assert payload["results"]["pass"] == 4 and payload["results"]["fail"] == 0
    assert payload["known_failures"] == ["suite_kernels.py::test_numerics[mul-int8-precise]"]


@pytest.mark.parametrize("report_change, message", [
    (dict(profile="ci"), "'ci' profile"),
    (dict(fail=1), "did not pass .*mul-int8"),
    (dict(sha="0" * 64), "rebuilt since"),
    (dict(sha=""), "does not record the library's sha256"),
    (dict(summary={"total": 0, "fail": 0}), "no passing test"),
    (dict(settings={"unit_timeout_s": 5.0}), r"cert settings differ from this suite's \(unit_timeout_s\)"),
])
def test_reports_that_do_not_earn_a_certificate_are_refused(library, report_change, message):
    sha = cert.sha256_of(library)
    change = dict(report_change)          # the parameter itself is shared between runs
    report = synthetic_report(change.pop("sha", sha), **change)
    with pytest.raises(certify.CertifyError, match=message):
        certify.build_payload(report, library, sha)


# -- sign, verify, tamper ------------------------------------------------------
def test_round_trip_sign_then_verify(library, keys):
    path = issue(library, keys["private"])
    status = cert.verify_certificate(path, library, keys["trusted"])
    assert status.certified, status.reason
    assert (status.code, status.key_id, status.abi_version) == (cert.CERTIFIED, keys["id"], "1.0")
    assert status.coverage["ops_passed"] == 1 and status.coverage["known_failures"] == 1
    # Re-indenting the file does not matter: the signature covers the canonical payload.
    rewrite(path, lambda doc: None)
    assert cert.verify_certificate(path, library, keys["trusted"]).certified


def _flip_a_byte(library: Path, path: Path, keys: dict) -> None:
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    library.write_bytes(bytes(data))


def _edit_payload(library: Path, path: Path, keys: dict) -> None:
    rewrite(path, lambda doc: doc["payload"]["coverage"]["ops"].update(mul=["int8/precise"]))


def _resign_with_another_key_keeping_the_trusted_id(library: Path, path: Path, keys: dict) -> None:
    forged = certify.sign(json.loads(path.read_text())["payload"], Ed25519PrivateKey.generate())
    rewrite(path, lambda doc: doc.update(signature=base64.b64encode(forged.signature).decode()))


def _sign_with_an_untrusted_key(library: Path, path: Path, keys: dict) -> None:
    other = Ed25519PrivateKey.generate()
    doc = json.loads(path.read_text())
    certify.write_certificate(certify.sign(doc["payload"], other), path)


def _truncate(library: Path, path: Path, keys: dict) -> None:
    path.write_text(path.read_text()[:40])


@pytest.mark.parametrize("tamper, code", [
    (_flip_a_byte, cert.HASH_MISMATCH),
    (_edit_payload, cert.BAD_SIGNATURE),
    (_resign_with_another_key_keeping_the_trusted_id, cert.BAD_SIGNATURE),
    (_sign_with_an_untrusted_key, cert.UNTRUSTED_KEY),
    (_truncate, cert.MALFORMED),
])
def test_tampering_is_rejected_with_the_right_reason(library, keys, tamper, code):
    path = issue(library, keys["private"])
    tamper(library, path, keys)
    status = cert.verify_certificate(path, library, keys["trusted"])
    assert (status.certified, status.code) == (False, code), status.reason


@pytest.mark.parametrize("overrides, code, said", [
    (dict(torch_version="2.12.1"), cert.TORCH_MISMATCH, "torch 2.12.1"),
    (dict(suite_version="9.0.0"), cert.SUITE_MISMATCH, "suite 9.0.0"),
])
def test_a_certificate_for_another_torch_or_suite_is_rejected(library, keys, overrides, code, said):
    path = issue(library, keys["private"], **overrides)
    status = cert.verify_certificate(path, library, keys["trusted"])
    assert (status.certified, status.code) == (False, code) and said in status.reason


def test_no_certificate_is_reported_as_such(library, keys):
    status = cert.CertificationPolicy(True, keys["trusted"]).assess("reference", str(library))
    assert (status.certified, status.code) == (False, cert.NO_CERTIFICATE)
    assert str(cert.default_certificate_path(library)) in status.reason


# -- the command line ----------------------------------------------------------
def test_cli_certify_from_report_then_verify(library, keys, tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(synthetic_report(cert.sha256_of(library))))
    out = tmp_path / "reference.flcert"
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"]), "--report", str(good),
                        "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    verify = ["verify", str(library), "--certificate", str(out), "--trusted-key", str(keys["public"])]
    assert fl_sdk_main(verify) == 0
    _flip_a_byte(library, out, keys)
    assert fl_sdk_main(verify) == 1
    assert "NOT CERTIFIED (hash_mismatch)" in capsys.readouterr().err


def test_cli_encrypted_key_from_the_environment_or_a_file(library, tmp_path, monkeypatch, capsys):
    key = tmp_path / "locked.key"
    monkeypatch.setenv("FL_SDK_KEY_PASSPHRASE", "from the environment")
    assert fl_sdk_main(["keygen", str(key), "--encrypt"]) == 0
    assert "encrypted with your passphrase" in capsys.readouterr().out
    report = tmp_path / "good.json"
    report.write_text(json.dumps(synthetic_report(cert.sha256_of(library))))
    certify_cmd = ["certify", str(library), "--key", str(key), "--report", str(report)]
    assert fl_sdk_main(certify_cmd) == 0                         # passphrase from the environment
    monkeypatch.delenv("FL_SDK_KEY_PASSPHRASE")
    assert fl_sdk_main(certify_cmd) == 1                         # none at all (stdin is no terminal here)
    assert "is encrypted: give its passphrase" in capsys.readouterr().err
    secret = tmp_path / "passphrase"
    secret.write_text("from the environment\n")                 # a trailing newline is not part of it
    assert fl_sdk_main(certify_cmd + ["--passphrase-file", str(secret)]) == 0
    secret.write_text("wrong")
    assert fl_sdk_main(certify_cmd + ["--passphrase-file", str(secret)]) == 1
    assert "wrong passphrase" in capsys.readouterr().err
    assert fl_sdk_main(["keygen", str(tmp_path / "other.key"), "--encrypt"]) == 1
    assert "--encrypt needs a passphrase" in capsys.readouterr().err


@pytest.mark.parametrize("report_change, message", [(dict(profile="ci"), "'ci' profile"),
                                                    (dict(fail=1), "did not pass")])
def test_cli_certify_refuses_a_report_that_did_not_pass_cert(library, keys, tmp_path, capsys,
                                                             report_change, message):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(synthetic_report(cert.sha256_of(library), **report_change)))
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"]), "--report", str(report)]) == 1
    assert message in capsys.readouterr().err
    assert not cert.default_certificate_path(library).exists()


def _fake_cert_run(monkeypatch, report: dict, status: int) -> list:
    """Stand in for the minutes-long cert run: write `report`, return `status`."""
    import conformance.runner
    calls = []

    def run(plugin, profile, json_path=None, **_):
        calls.append((plugin, profile))
        report.get("plugin", {}).pop("sha256", None)    # the command vouches for the hash itself
        Path(json_path).write_text(json.dumps(report))
        return status
    monkeypatch.setattr(conformance.runner, "run", run)
    return calls


def test_cli_certify_runs_the_cert_profile_and_signs_what_it_hashed(library, keys, monkeypatch, capsys):
    calls = _fake_cert_run(monkeypatch, synthetic_report("unused"), 0)
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"])]) == 0
    assert calls == [(str(library), "cert")]
    status = cert.verify_certificate(cert.default_certificate_path(library), library, keys["trusted"])
    assert status.certified, status.reason


def test_cli_certify_issues_nothing_when_the_cert_run_fails(library, keys, monkeypatch, capsys):
    _fake_cert_run(monkeypatch, synthetic_report("unused", fail=1), 1)
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"])]) == 1
    assert "did not pass" in capsys.readouterr().err
    assert not cert.default_certificate_path(library).exists()


# -- the runtime ---------------------------------------------------------------
def test_config_section_is_validated_and_names_the_key(keys):
    section = parse_config({"certification": {"require_certified": True,
                                              "trusted_keys": [str(keys["public"])],
                                              "certificates": {"reference": "/x/ref.flcert"}}}).certification
    assert section.require_certified and section.certificates == (("reference", "/x/ref.flcert"),)
    for bad, key in [({"require_certified": "yes"}, "certification.require_certified"),
                     ({"require_certified": True}, "certification.trusted_keys"),
                     ({"trusted_key": []}, "certification.trusted_key")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            parse_config({"certification": bad})


def test_the_hash_is_checked_before_the_library_is_loaded(tmp_path, keys):
    # Not a shared library at all: dlopen would fail, so an UncertifiedPluginError
    # (not "cannot load") proves the check ran first.
    fake = tmp_path / "libfake.so"
    fake.write_bytes(b"\x7fELF not really")
    policy = cert.CertificationPolicy(True, keys["trusted"])
    with pytest.raises(UncertifiedPluginError, match="no certificate") as refused:
        load_plugin(PluginSource("fake", str(fake), "config"), policy)
    assert refused.value.code == cert.NO_CERTIFICATE
    issue(fake, keys["private"])
    with pytest.raises(PluginLoadError, match="cannot load") as loaded:
        load_plugin(PluginSource("fake", str(fake), "config"), policy)
    assert not isinstance(loaded.value, UncertifiedPluginError)


RUNTIME_PROBE = """
import json, torch_fl
from fl_runtime import UncertifiedPluginError
rt = torch_fl.runtime()
print(json.dumps({
    "loaded": {p.source.path: [p.certification.certified, p.certification.code] for p in rt.plugins},
    "refused": {f.source.path: f.error.code for f in rt.load_failures if isinstance(f.error, UncertifiedPluginError)},
    "statuses": {s["path"]: s["certified"] for s in torch_fl.plugin_certifications()},
    "devices": torch_fl.device_count()}))
"""


def _probe(python, tmp_path: Path, library: Path, keys: dict) -> dict:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"plugins": [str(library)], "certification": {
        "require_certified": True, "trusted_keys": [str(keys["public"])]}}))
    result = python(RUNTIME_PROBE, env={"TORCH_FL_CONFIG": str(config)}, timeout=180)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_runtime_switch_refuses_uncertified_and_loads_certified(python, tmp_path, library, keys):
    refused = _probe(python, tmp_path, library, keys)
    assert refused["refused"].get(str(library)) == cert.NO_CERTIFICATE
    assert str(library) not in refused["loaded"]
    issue(library, keys["private"])
    accepted = _probe(python, tmp_path, library, keys)
    assert accepted["loaded"][str(library)] == [True, cert.CERTIFIED]
    assert accepted["devices"] >= 1 and accepted["statuses"][str(library)] is True
    # The installed reference build has no certificate: refused, never crashing the others.
    assert str(REFERENCE) in accepted["refused"]


# -- certificates across PyTorch minors (docs/vendors/certify.md "Certificates across PyTorch minors") --
def _other_minor() -> str:
    major, minor = (int(p) for p in cert.installed_torch_version().split(".")[:2])
    return f"{major}.{minor + 1}.0"


def test_a_certificate_from_another_minor_counts_once_extended_by_its_certifier(library, keys, tmp_path):
    path = issue(library, keys["private"], torch_version=_other_minor())
    status = cert.verify_certificate(path, library, keys["trusted"])
    assert status.code == cert.TORCH_MISMATCH and "--add-torch" in status.reason
    # a passing cert run under this torch, where one case the other minor passed failed...
    here = synthetic_report(cert.sha256_of(library))
    here["tests"][2]["status"] = "not_supported"          # add/float16 not vouched for here
    report = tmp_path / "here.json"
    report.write_text(json.dumps(here))
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"]), "--report", str(report),
                        "--extend"]) == 0
    status = cert.verify_certificate(path, library, keys["trusted"])
    assert status.certified, status.reason
    payload = json.loads(path.read_text())["payload"]
    assert payload["torch_minors"] == sorted([cert.torch_minor(_other_minor()),
                                              cert.torch_minor(cert.installed_torch_version())],
                                             key=lambda m: tuple(map(int, m.split("."))))
    # ... keeps only what passed under both minors
    assert payload["coverage"]["ops"] == {"add": ["float32/precise"]}
    assert [run["torch_version"] for run in payload["runs"]] == [_other_minor(), here["torch_version"]]


def test_only_the_certifier_can_extend_and_only_with_a_passing_run(library, keys, tmp_path, capsys):
    path = issue(library, keys["private"], torch_version=_other_minor())
    other, _, _ = certify.generate_key(tmp_path / "other.key")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(synthetic_report(cert.sha256_of(library))))
    assert fl_sdk_main(["certify", str(library), "--key", str(other), "--report", str(good), "--extend"]) == 1
    assert "only its own certifier" in capsys.readouterr().err
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps(synthetic_report(cert.sha256_of(library), fail=1)))
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"]), "--report", str(failed),
                        "--extend"]) == 1
    assert "did not pass" in capsys.readouterr().err
    assert json.loads(path.read_text())["payload"]["torch_minors"] == [cert.torch_minor(_other_minor())]


def test_add_torch_runs_the_cert_profile_with_the_other_interpreter(library, keys, tmp_path, capsys):
    """--add-torch PYTHON runs `PYTHON -m fl_sdk test LIB --profile cert --json ...`; a stand-in
    interpreter writes the report such a run would, so the test does not take a cert run's time."""
    issue(library, keys["private"], torch_version=_other_minor())
    report = synthetic_report(cert.sha256_of(library))
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n"
                    "out=''; while [ $# -gt 0 ]; do [ \"$1\" = --json ] && out=$2; shift; done\n"
                    f"cat > \"$out\" <<'JSON'\n{json.dumps(report)}\nJSON\n")
    fake.chmod(0o755)
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"]), "--add-torch", str(fake)]) == 0
    status = cert.verify_certificate(cert.default_certificate_path(library), library, keys["trusted"])
    assert status.certified, status.reason
    assert fl_sdk_main(["certify", str(library), "--key", str(keys["private"]),
                        "--add-torch", str(tmp_path / "no-such-python")]) == 1
    assert "cannot run" in capsys.readouterr().err
