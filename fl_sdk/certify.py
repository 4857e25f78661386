"""Conformance certificates, the certifier's side: keys, payload, signature.

The payload is built from the JSON report of a `cert` profile run (see
conformance.report) and only from a run that passed: a report of another
profile, with any failure, or for another build of the library is refused.
Verification is fl_runtime.certification's job; this module alone touches the
private key.
"""
from __future__ import annotations

import datetime
import os
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conformance.profiles import PROFILES
from fl_runtime.plugins.certification import (FORMAT, Certificate, canonical_bytes, certified_torch_minors, key_id,
                                              read_certificate, torch_minor)

from .passphrase import where_to_give_it

CERT_PROFILE = "cert"
_ENCRYPTED_PEM = b"-----BEGIN ENCRYPTED PRIVATE KEY-----"
_PRIVATE_MODE = 0o600


class CertifyError(RuntimeError):
    """A certificate cannot be issued (bad key, or a report that does not earn one)."""


# -- keys ----------------------------------------------------------------------
def generate_key(path: str | Path, overwrite: bool = False,
                 passphrase: bytes | None = None) -> tuple[Path, Path, str]:
    """Write a new Ed25519 private key (PEM, mode 0600; encrypted with `passphrase` when
    given) at `path` and its public key at `path`.pub; returns (private path, public path,
    key id)."""
    private_path, public_path = Path(path), Path(str(path) + ".pub")
    if not overwrite:
        for existing in (private_path, public_path):
            if existing.exists():
                raise CertifyError(f"{existing} already exists; pass --force to replace the key "
                                   "(certificates it signed will no longer verify against a new key)")
    key = Ed25519PrivateKey.generate()
    encryption = (serialization.BestAvailableEncryption(passphrase) if passphrase
                  else serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    _write_private(private_path, pem)
    public = key.public_key()
    public_path.write_bytes(public.public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo))
    return private_path, public_path, key_id(public)


def _write_private(path: Path, data: bytes) -> None:
    # Created 0600 from the start (not chmod-ed after), so it is never readable by others.
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _PRIVATE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def key_is_encrypted(path: str | Path) -> bool:
    """Does the PEM file at `path` hold a passphrase-protected (PKCS#8 encrypted) key?"""
    try:
        return _ENCRYPTED_PEM in Path(path).read_bytes()
    except OSError:
        return False   # load_private_key says why it cannot be read


def load_private_key(path: str | Path, passphrase: bytes | None = None) -> Ed25519PrivateKey:
    """The certifier's key (decrypted with `passphrase` if it is encrypted); refused when
    others may read it (as ssh does)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode & 0o777
        data = path.read_bytes()
    except OSError as exc:
        raise CertifyError(f"cannot read private key {path}: {exc}; create one with `fl-sdk keygen`") from exc
    if mode & 0o077:
        raise CertifyError(f"private key {path} is readable by others (mode {mode:o}): chmod 600 {path}")
    encrypted = _ENCRYPTED_PEM in data
    if encrypted and not passphrase:
        raise CertifyError(f"private key {path} is encrypted: give its passphrase with {where_to_give_it()}")
    try:
        key = serialization.load_pem_private_key(data, password=passphrase if encrypted else None)
    except (ValueError, TypeError) as exc:
        if encrypted:
            raise CertifyError(f"wrong passphrase for private key {path}") from exc
        raise CertifyError(f"{path} is not a PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise CertifyError(f"{path} holds a {type(key).__name__}; certificates need an Ed25519 key "
                           "(`fl-sdk keygen`)")
    return key


# -- payload -------------------------------------------------------------------
def check_report(report: Mapping[str, Any], library_sha256: str) -> None:
    """Raise CertifyError unless the report is a passing cert run of exactly this library."""
    profile = (report.get("profile") or {}).get("name")
    if profile != CERT_PROFILE:
        raise CertifyError(f"the report is from the '{profile}' profile; only a '{CERT_PROFILE}' run earns a "
                           f"certificate (fl-sdk test PLUGIN --profile {CERT_PROFILE} --json FILE)")
    settings = {k: v for k, v in report["profile"].items() if k != "name"}
    fixed = {k: v for k, v in vars(PROFILES[CERT_PROFILE]).items() if k != "name"}
    if settings != fixed:
        changed = sorted(k for k in fixed.keys() | settings.keys() if settings.get(k) != fixed.get(k))
        raise CertifyError(f"the report's cert settings differ from this suite's ({', '.join(changed)}); "
                           "only an unmodified cert run earns a certificate")
    summary = report.get("summary") or {}
    if summary.get("fail", 0) or report.get("exit_status") != 0:
        failed = [t.get("nodeid") for t in report.get("tests", []) if t.get("status") == "fail"][:10]
        raise CertifyError(f"the run did not pass ({summary.get('fail', '?')} failed, exit status "
                           f"{report.get('exit_status')}): fix {', '.join(failed) or 'the failures'} first")
    if not summary.get("total") or not summary.get("pass"):
        raise CertifyError("the report records no passing test; it cannot certify anything")
    reported = (report.get("plugin") or {}).get("sha256")
    if not reported:
        raise CertifyError("the report does not record the library's sha256, so it cannot be tied to a "
                           "binary: run `fl-sdk certify PLUGIN --key KEY` without --report")
    if reported != library_sha256:
        raise CertifyError(f"the report is for a library with sha256 {reported[:16]}…, this one is "
                           f"{library_sha256[:16]}…: it was rebuilt since; run the cert profile again")
    if not report.get("torch_version") or not report.get("suite_version"):
        raise CertifyError("the report does not record the torch and suite versions it ran with")
    if "stack" in report and not isinstance(report["stack"], dict):
        raise CertifyError(f"the report's 'stack' must be a mapping of field to version, got {report['stack']!r}")


def build_payload(report: Mapping[str, Any], library_path: str | Path, library_sha256: str) -> dict[str, Any]:
    """What the signature covers, from a passing cert report (checked here first)."""
    check_report(report, library_sha256)
    plugin = report["plugin"]
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {
        "format": FORMAT,
        "plugin": {"name": plugin.get("name"), "vendor": plugin.get("vendor"), "version": plugin.get("version"),
                   "file": Path(library_path).name, "sha256": library_sha256,
                   "size_bytes": Path(library_path).stat().st_size},
        "abi_version": plugin.get("abi_version"),
        "suite_version": report["suite_version"],
        "torch_version": report["torch_version"],
        # The minors whose cert runs this certificate vouches for; `extend_payload` adds one.
        "torch_minors": [torch_minor(report["torch_version"])],
        "profile": CERT_PROFILE,
        "seed": report.get("seed"),
        "report_generated_at": report.get("generated_at"),
        "issued_at": now,
        "results": {k: v for k, v in report["summary"].items() if isinstance(v, int)},
        "categories": report["summary"].get("categories", {}),
        "coverage": coverage(report.get("tests", [])),
        "known_failures": sorted(t["nodeid"] for t in report.get("tests", []) if t.get("status") == "known_failure"),
        # The stack the run used (library_stack); a report without one gives a certificate the
        # runtime calls "stack unknown", still valid.
        **({"stack": dict(report["stack"])} if report.get("stack") else {}),
    }


def library_stack(library_path: str | Path) -> dict[str, Any]:
    """The stack this machine runs the library on (torch, Torch-FL, the negotiated ABI, the
    plugin's version, its driver version per device type, OS/arch): what a certificate
    records of its cert run, in the fields fl_runtime.plugins.stack compares at load."""
    from fl_runtime.devices.registry import probe_plugin, record_driver_versions
    from fl_runtime.errors import FLError
    from fl_runtime.plugins.loader import PluginSource, load_plugin
    from fl_runtime.plugins.stack import certificate_stack
    try:
        plugin = load_plugin(PluginSource(Path(library_path).stem, str(library_path), "fl-sdk certify"))
        record_driver_versions(plugin, probe_plugin(plugin))
    except FLError as exc:
        raise CertifyError(f"cannot read the stack {library_path} runs on: {exc}") from exc
    return certificate_stack(plugin)


def coverage(tests: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Per op, the `dtype/variant` numerics cases that passed; ops with none that
    the suite could not check; with a `collectives` category, its checks that passed
    (`family-ranks`, e.g. all_reduce-4, and error_statuses).  Only numerics count (they name a dtype): the
    robustness tests also name ops, but a launch that does not crash is not coverage."""
    passed: dict[str, set[str]] = defaultdict(set)
    untested: set[str] = set()
    collectives: set[str] = set()       # ABI 1.1: the `collectives` tests that passed, e.g. all_reduce-2ranks
    for test in tests:
        if test.get("category") == "collectives" and test.get("status") == "pass":
            collectives.add(test.get("test", "").removeprefix("test_").removeprefix("collective[").rstrip("]"))
        op, dtype = test.get("op"), test.get("dtype")
        if not op or not dtype:
            continue
        if test.get("status") == "pass":
            passed[op].add(f"{dtype}/{test.get('variant') or 'default'}")
        elif test.get("status") == "untested":
            untested.add(op)
    result: dict[str, Any] = {"ops": {op: sorted(cases) for op, cases in sorted(passed.items())},
                              "untested_ops": sorted(untested - set(passed))}
    if any(test.get("category") == "collectives" for test in tests):     # suites without it: as before
        result["collectives"] = sorted(collectives)
    return result


def extend_payload(payload: Mapping[str, Any], report: Mapping[str, Any], library_sha256: str) -> dict[str, Any]:
    """A certificate's payload extended by a passing cert run of the same library under another
    PyTorch minor (docs/vendors/certify.md "Certificates across PyTorch minors"): the minor joins `torch_minors`, and an
    op's coverage keeps only the cases that passed under every minor (numerics are judged
    against each PyTorch's own CPU results, so a case certified under one minor only is not
    certified under the other)."""
    check_report(report, library_sha256)
    if (payload.get("plugin") or {}).get("sha256") != library_sha256:
        raise CertifyError("the certificate being extended is for another build of this library: certify this "
                           "build first (without --add-torch)")
    if report["suite_version"] != payload.get("suite_version"):
        raise CertifyError(f"the new run used suite {report['suite_version']}, the certificate suite "
                           f"{payload.get('suite_version')}: certify again from scratch with one suite")
    added = torch_minor(report["torch_version"])
    minors = certified_torch_minors(payload)
    extended = dict(payload)
    extended["torch_minors"] = sorted(set(minors) | {added}, key=lambda m: tuple(int(p) for p in m.split(".")))
    theirs = coverage(report.get("tests", []))
    ours = payload.get("coverage") or {}
    both = {op: sorted(set(cases) & set(theirs["ops"].get(op, ())))
            for op, cases in (ours.get("ops") or {}).items()}
    extended["coverage"] = {"ops": {op: cases for op, cases in both.items() if cases},
                            "untested_ops": sorted(set(ours.get("untested_ops") or [])
                                                   | set(theirs["untested_ops"])
                                                   | {op for op, cases in both.items() if not cases})}
    if "collectives" in ours or "collectives" in theirs:
        extended["coverage"]["collectives"] = sorted(set(ours.get("collectives") or [])
                                                     & set(theirs.get("collectives") or []))
    extended["runs"] = [*payload.get("runs", [{"torch_version": payload.get("torch_version"),
                                               "results": payload.get("results")}]),
                        {"torch_version": report["torch_version"],
                         "results": {k: v for k, v in report["summary"].items() if isinstance(v, int)}}]
    extended["issued_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return extended


# -- signing -------------------------------------------------------------------
def sign(payload: dict[str, Any], private_key: Ed25519PrivateKey) -> Certificate:
    return Certificate(payload, private_key.sign(canonical_bytes(payload)), key_id(private_key.public_key()))


def write_certificate(certificate: Certificate, path: str | Path) -> Path:
    """Write atomically: a runtime reading the certificate never sees half of it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        handle.write(certificate.to_json())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def certify_report(report: Mapping[str, Any], library_path: str | Path, library_sha256: str,
                   key_path: str | Path, out: str | Path, passphrase: bytes | None = None) -> Path:
    """Check the report, sign its payload with the key at `key_path`, write `out`."""
    key = load_private_key(key_path, passphrase)
    return write_certificate(sign(build_payload(report, library_path, library_sha256), key), out)


def extend_certificate(report: Mapping[str, Any], library_sha256: str, key_path: str | Path,
                       certificate: str | Path, passphrase: bytes | None = None) -> Path:
    """Add the report's PyTorch minor to the certificate at `certificate` (signed by this very
    key, checked first) and sign it again in place."""
    key = load_private_key(key_path, passphrase)
    try:
        existing = read_certificate(certificate)
    except Exception as exc:  # noqa: BLE001 - missing, unreadable or malformed: say which file
        raise CertifyError(f"cannot extend {certificate}: {exc}; certify the plugin first (without "
                           "--add-torch)") from exc
    try:
        key.public_key().verify(existing.signature, canonical_bytes(existing.payload))
    except Exception as exc:  # noqa: BLE001 - InvalidSignature: another key or an altered file
        raise CertifyError(f"{certificate} was not signed by {key_path} (or was altered): only its own "
                           "certifier can extend a certificate") from exc
    return write_certificate(sign(extend_payload(existing.payload, report, library_sha256), key), certificate)
