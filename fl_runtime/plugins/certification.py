"""Conformance certificates, the runtime's side: read, verify, never sign.

A certificate is a JSON file:

    {"format": "torch-fl-certificate/1", "algorithm": "ed25519",
     "key_id": "<sha256 of the signer's raw public key, hex>",
     "payload": {...plugin sha256, ABI, suite and torch versions, coverage, results...},
     "signature": "<base64 Ed25519 signature of canonical_bytes(payload)>"}

The signature covers the payload's canonical serialisation (sorted keys, no
whitespace, ASCII), so the file may be re-indented without breaking it.  It is
found next to the library as `<library>.flcert` or at the path the config's
`certification.certificates` gives for the plugin.  A payload may carry the `stack`
its cert run used (kept in CertificationStatus.stack; fl_runtime.plugins.stack says
whether the running stack is that one); one without it is still valid.  Signing lives in
fl_sdk.certify; this module must stay usable without the private key.
`cryptography` and `packaging` are imported when a certificate or key is read: a
start-up with uncertified plugins (the default policy) never needs them, and every
start-up pays for its imports (docs/benchmarks/index.md "Start-up").
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import importlib.metadata
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fl_runtime import abi
from fl_runtime.errors import ConfigError
from fl_runtime.version import CONFORMANCE_SUITE_VERSION

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from fl_runtime.config import CertificationConfig

FORMAT = "torch-fl-certificate/1"
ALGORITHM = "ed25519"
SUFFIX = ".flcert"
_RAW_KEY_BYTES = 32
_CHUNK = 1 << 20

# Why a plugin is or is not certified; `reason` says it in words.
CERTIFIED, NO_CERTIFICATE, MALFORMED = "certified", "no_certificate", "malformed"
UNTRUSTED_KEY, BAD_SIGNATURE, HASH_MISMATCH = "untrusted_key", "bad_signature", "hash_mismatch"
ABI_MISMATCH, TORCH_MISMATCH, SUITE_MISMATCH = "abi_mismatch", "torch_mismatch", "suite_mismatch"


class CertificateFormatError(ValueError):
    """A certificate file that is not a well-formed Torch-FL certificate."""


@dataclass(frozen=True)
class CertificationStatus:
    """Whether one plugin library is certified, and by what (for `devices` and doctor)."""
    certified: bool
    code: str                              # one of the constants above
    reason: str                            # a sentence: what was found and what to do
    certificate: str | None = None         # the certificate file considered
    key_id: str | None = None
    suite_version: str | None = None
    torch_version: str | None = None
    abi_version: str | None = None
    coverage: dict[str, Any] = field(default_factory=dict)
    # The stack the cert run used (torch, Torch-FL, ABI, plugin version, drivers, OS/arch);
    # None for certificates issued before it was recorded ("stack unknown", still valid).
    # fl_runtime.plugins.stack compares it with the running stack.
    stack: dict[str, Any] | None = None


@dataclass(frozen=True)
class Certificate:
    payload: dict[str, Any]
    signature: bytes
    key_id: str

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "algorithm": ALGORITHM, "key_id": self.key_id,
                           "payload": self.payload,
                           "signature": base64.b64encode(self.signature).decode("ascii")}, indent=1)


def canonical_bytes(payload: Mapping[str, Any]) -> bytes:
    """The exact bytes a signature covers: one serialisation for signer and verifier."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def sha256_of(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks (plugin libraries can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def key_id(public_key: Ed25519PublicKey) -> str:
    """A stable name for a key: SHA-256 of its raw 32 bytes, hex."""
    from cryptography.hazmat.primitives import serialization
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file or a file holding the raw 32 bytes.

    Raises ValueError (naming the file) for anything else."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    data = Path(path).read_bytes()
    if data.lstrip().startswith(b"-----BEGIN"):
        key = serialization.load_pem_public_key(data)
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
        return key
    if len(data) == _RAW_KEY_BYTES:
        return Ed25519PublicKey.from_public_bytes(data)
    raise ValueError(f"{path} is neither a PEM public key nor {_RAW_KEY_BYTES} raw key bytes "
                     f"({len(data)} bytes); use the .pub file `fl-sdk keygen` wrote")


def trust_store(paths: tuple[str, ...] | list[str],
                config_key: str = "certification.trusted_keys") -> dict[str, Ed25519PublicKey]:
    """The trusted keys by key id; an unreadable key is a ConfigError naming its entry."""
    store: dict[str, Ed25519PublicKey] = {}
    for i, path in enumerate(paths):
        try:
            key = load_public_key(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{config_key}[{i}]", f"cannot read public key {path}: {exc}") from exc
        store[key_id(key)] = key
    return store


def read_certificate(path: str | Path) -> Certificate:
    """Parse a certificate file; CertificateFormatError says what is wrong with it."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CertificateFormatError(f"cannot read certificate {path}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CertificateFormatError(f"{path} is not a {FORMAT} certificate")
    if doc.get("algorithm") != ALGORITHM:
        raise CertificateFormatError(f"{path}: unsupported signature algorithm {doc.get('algorithm')!r}")
    payload, signature, kid = doc.get("payload"), doc.get("signature"), doc.get("key_id")
    if not isinstance(payload, dict) or not isinstance(signature, str) or not isinstance(kid, str):
        raise CertificateFormatError(f"{path}: 'payload', 'signature' and 'key_id' are required")
    try:
        raw_signature = base64.b64decode(signature, validate=True)
    except binascii.Error as exc:
        raise CertificateFormatError(f"{path}: signature is not base64: {exc}") from exc
    return Certificate(payload, raw_signature, kid)


def default_certificate_path(library_path: str | Path) -> Path:
    """Where the convention puts a library's certificate: `<library>.flcert` beside it."""
    library = Path(library_path)
    return library.with_name(library.name + SUFFIX)


def coverage_summary(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The few coverage figures a status line shows (the payload has the detail)."""
    coverage = payload.get("coverage") or {}
    results = payload.get("results") or {}
    return {"ops_passed": len(coverage.get("ops") or {}), "ops_untested": len(coverage.get("untested_ops") or []),
            "tests": results.get("total"), "passed": results.get("pass"),
            "known_failures": len(payload.get("known_failures") or [])}


def verify_certificate(certificate: str | Path, library_path: str | Path,
                       trusted_keys: Mapping[str, Ed25519PublicKey],
                       library_sha256: str | None = None) -> CertificationStatus:
    """Check a certificate against a library and the trusted keys.

    Order matters: nothing in a payload is believed before its signature checks
    out, and the library is hashed only then (pass `library_sha256` when the
    caller already has it).  Never raises for a bad certificate: the status says why.
    """
    if not Path(certificate).is_file():
        return _no_certificate(certificate, library_path, "name it (`fl-sdk verify --certificate FILE`)")
    try:
        cert = read_certificate(certificate)
    except CertificateFormatError as exc:
        return _refused(MALFORMED, f"{exc}; certify the plugin again (`fl-sdk certify`)", certificate)
    public_key = trusted_keys.get(cert.key_id)
    if public_key is None:
        return _refused(UNTRUSTED_KEY, f"certificate {certificate} is signed by key {cert.key_id[:16]}…, which "
                        "is not in certification.trusted_keys: add the certifier's public key if you trust it",
                        certificate, cert.key_id)
    from cryptography.exceptions import InvalidSignature
    try:
        public_key.verify(cert.signature, canonical_bytes(cert.payload))
    except (InvalidSignature, ValueError):
        return _refused(BAD_SIGNATURE, f"certificate {certificate} does not verify against key "
                        f"{cert.key_id[:16]}…: it was altered or signed by another key; obtain a fresh "
                        "certificate from the certifier", certificate, cert.key_id)
    return _check_payload(cert, str(certificate), library_path, library_sha256 or sha256_of(library_path))


def _check_payload(cert: Certificate, certificate: str, library_path: str | Path,
                   actual_sha256: str) -> CertificationStatus:
    payload = cert.payload
    plugin = payload.get("plugin") if isinstance(payload.get("plugin"), dict) else {}
    facts = {"certificate": certificate, "key_id": cert.key_id,
             "suite_version": payload.get("suite_version"), "torch_version": payload.get("torch_version"),
             "abi_version": payload.get("abi_version"), "coverage": coverage_summary(payload),
             "stack": payload["stack"] if isinstance(payload.get("stack"), dict) else None}
    if plugin.get("sha256") != actual_sha256:
        return CertificationStatus(False, HASH_MISMATCH, f"{library_path} (sha256 {actual_sha256[:16]}…) is not "
                                   f"the binary certificate {certificate} was issued for (sha256 "
                                   f"{str(plugin.get('sha256'))[:16]}…): certify this build", **facts)
    problem = _version_problem(payload)
    if problem:
        return CertificationStatus(False, problem[0], f"certificate {certificate}: {problem[1]}", **facts)
    return CertificationStatus(True, CERTIFIED, f"certified by key {cert.key_id[:16]}… (suite "
                               f"{facts['suite_version']}, torch {facts['torch_version']}, ABI "
                               f"{facts['abi_version']})", **facts)


def _version_problem(payload: Mapping[str, Any]) -> tuple[str, str] | None:
    """(code, sentence) when the certificate was issued for another ABI, torch or suite."""
    abi_version = str(payload.get("abi_version", ""))
    if abi_version.split(".")[0] != str(abi.ABI_MAJOR):
        return ABI_MISMATCH, (f"issued for ABI {abi_version}, this runtime speaks ABI {abi.ABI_MAJOR}.x: "
                              "rebuild and certify the plugin against this SDK")
    torch_now = installed_torch_version()
    minors = certified_torch_minors(payload)
    if not any(_same_series(minor, torch_now) for minor in minors):
        return TORCH_MISMATCH, (f"issued for torch {', '.join(minors) or '(none recorded)'} (its cert runs used "
                                f"torch {_run_versions(payload)}), torch {torch_now} "
                                "is installed: extend the certificate to this torch (`fl-sdk certify PLUGIN "
                                "--key KEY --add-torch PYTHON`, "
                                "docs/vendors/certify.md)")
    suite_now = installed_suite_version()
    if not _same_series(payload.get("suite_version"), suite_now):
        return SUITE_MISMATCH, (f"issued by conformance suite {payload.get('suite_version')}, this Torch-FL "
                                f"ships suite {suite_now}: certify the plugin again with this suite")
    return None


def certified_torch_minors(payload: Mapping[str, Any]) -> list[str]:
    """The PyTorch minors ('2.13', ...) a certificate's cert runs covered: `torch_minors`,
    or the one `torch_version` of a certificate from before runs could be added."""
    minors = payload.get("torch_minors")
    if isinstance(minors, list) and all(isinstance(m, str) for m in minors):
        return minors
    version = payload.get("torch_version")
    return [torch_minor(str(version))] if version else []


def _run_versions(payload: Mapping[str, Any]) -> str:
    runs = payload.get("runs")
    if isinstance(runs, list):
        return ", ".join(str(run.get("torch_version")) for run in runs if isinstance(run, dict))
    return str(payload.get("torch_version"))


def torch_minor(version: str) -> str:
    """'2.14.1+cu130' -> '2.14'."""
    from packaging.version import InvalidVersion, Version
    try:
        return ".".join(str(part) for part in Version(version).release[:2])
    except InvalidVersion:
        return version


def _same_series(certified: Any, installed: str) -> bool:
    """Same major.minor: patch releases of torch and of the suite keep a certificate valid."""
    from packaging.version import InvalidVersion, Version
    try:
        return Version(str(certified)).release[:2] == Version(installed).release[:2]
    except InvalidVersion:
        return False


def installed_torch_version() -> str:
    # Read from metadata, not `import torch`: `fl-sdk verify` should not pay torch's import.
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:   # a torch built from source, on sys.path
        import torch
        return torch.__version__


def installed_suite_version() -> str:
    return CONFORMANCE_SUITE_VERSION


def _no_certificate(certificate: str | Path, library_path: str | Path, elsewhere: str) -> CertificationStatus:
    return _refused(NO_CERTIFICATE, f"no certificate at {certificate}: certify the plugin (`fl-sdk certify "
                    f"{library_path} --key KEY`) or, if it has one elsewhere, {elsewhere}", None)


def _refused(code: str, reason: str, certificate: str | Path | None,
             kid: str | None = None) -> CertificationStatus:
    return CertificationStatus(False, code, reason, str(certificate) if certificate else None, kid)


@dataclass(frozen=True)
class CertificationPolicy:
    """What the config asks of plugins: built once per runtime start, used per library."""
    require_certified: bool = False
    trusted_keys: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)
    certificates: Mapping[str, str] = field(default_factory=dict)   # plugin name -> certificate path

    @classmethod
    def from_config(cls, config: CertificationConfig) -> CertificationPolicy:
        """From a config.CertificationConfig; reads (and checks) the trusted key files."""
        return cls(config.require_certified, trust_store(config.trusted_keys), dict(config.certificates))

    def certificate_for(self, plugin_name: str, library_path: str) -> Path:
        explicit = self.certificates.get(plugin_name)
        return Path(explicit) if explicit else default_certificate_path(library_path)

    def assess(self, plugin_name: str, library_path: str,
               library_sha256: str | None = None) -> CertificationStatus:
        """The status of one library, without loading it.  Hashes only when there is
        a certificate to check, so an uncertified plugin costs one stat(); the loader
        passes `library_sha256`, hashed from the descriptor it loads (plugins.pinned)."""
        certificate = self.certificate_for(plugin_name, library_path)
        if not certificate.is_file():
            return _no_certificate(certificate, library_path,
                                   f"name it in the config's certification.certificates.{plugin_name}")
        return verify_certificate(certificate, library_path, self.trusted_keys, library_sha256)
