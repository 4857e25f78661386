"""`fl-sdk certify PLUGIN --key KEY`: run the cert profile and, if it passes, sign a certificate."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def register(subparsers) -> None:
    cmd = subparsers.add_parser("certify", help="run the cert profile and sign a certificate if it passes")
    cmd.add_argument("plugin", help="plugin library path, plugin project directory, or an installed plugin's name")
    cmd.add_argument("--key", required=True, help="the certifier's private key (fl-sdk keygen)")
    cmd.add_argument("--out", metavar="FILE", help="certificate file (default: LIBRARY.flcert beside the library, "
                     "where the runtime looks)")
    cmd.add_argument("--report", metavar="JSON", help="sign this existing cert-profile JSON report instead of "
                     "running the suite")
    cmd.add_argument("--json", metavar="FILE", help="keep the JSON report of the run here")
    cmd.add_argument("--add-torch", metavar="PYTHON", help="extend the existing certificate to another PyTorch "
                     "minor: run the cert profile with this interpreter (a venv with that torch and torch-fl) "
                     "and add its minor (docs/vendors/certify.md)")
    cmd.add_argument("--extend", action="store_true", help="with --report: add that report's PyTorch minor to "
                     "the existing certificate instead of issuing a new one")
    cmd.add_argument("--passphrase-file", metavar="FILE",
                     help="passphrase of an encrypted key (else $FL_SDK_KEY_PASSPHRASE, else a prompt)")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from conformance.target import TargetError, resolve
    from fl_runtime.plugins.certification import default_certificate_path, sha256_of

    from ..certify import (
        CertifyError,
        certify_report,
        extend_certificate,
        key_is_encrypted,
        load_private_key,
    )
    from ..passphrase import PassphraseError, read_passphrase
    try:
        library = resolve(args.plugin).path
        passphrase = (read_passphrase(args.passphrase_file, f"passphrase for {args.key}: ")
                      if key_is_encrypted(args.key) else None)
        load_private_key(args.key, passphrase)   # a bad key should fail now, not after a 15-minute run
        sha256 = sha256_of(library)
        out = args.out or default_certificate_path(library)
        if args.add_torch:
            report = _run_cert_profile(library, sha256, args.json, python=args.add_torch)
            out = extend_certificate(report, sha256, args.key, out, passphrase)
        elif args.extend:
            if not args.report:
                raise CertifyError("--extend adds a report's PyTorch minor: give the report with --report FILE")
            out = extend_certificate(_read_report(args.report), sha256, args.key, out, passphrase)
        else:
            report = _read_report(args.report) if args.report else _run_cert_profile(library, sha256, args.json)
            out = certify_report(report, library, sha256, args.key, out, passphrase)
    except (TargetError, CertifyError, PassphraseError, OSError) as exc:
        print(f"fl-sdk certify: {exc}", file=sys.stderr)
        return 1
    print(f"certificate for {library} (sha256 {sha256}) written to {out}")
    return 0


def _read_report(path: str) -> dict:
    from ..certify import CertifyError
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CertifyError(f"cannot read report {path}: {exc}") from exc


def _run_cert_profile(library: str, sha256: str, keep_json: str | None, python: str | None = None) -> dict:
    """Run the suite's cert profile (in this interpreter, or as `fl-sdk test` in `python`,
    another venv with another PyTorch); the report, with the facts this run vouches for added."""
    from fl_runtime.plugins.certification import sha256_of

    from ..certify import CERT_PROFILE, CertifyError, library_stack
    with tempfile.TemporaryDirectory(prefix="fl-certify-") as tmp:
        json_path = keep_json or str(Path(tmp) / "report.json")
        status = _suite_in(python, library, json_path) if python else _suite_here(library, json_path)
        if not Path(json_path).is_file():
            raise CertifyError(f"the {CERT_PROFILE} run wrote no report (exit status {status})")
        report = _read_report(json_path)
    if status != 0:
        where = f" under {python}" if python else ""
        raise CertifyError(f"the {CERT_PROFILE} profile did not pass{where} (exit status {status}); nothing was "
                           "signed: fix the failures it listed and run again")
    # The library must be the one that was hashed before the run, byte for byte.
    if sha256_of(library) != sha256:
        raise CertifyError(f"{library} changed while the suite ran; run `fl-sdk certify` again")
    report.setdefault("plugin", {}).setdefault("sha256", sha256)
    # The stack the run used, read after it (loading the library first would put it in the
    # process the suite runs, and forks, in); recorded in the certificate.
    report.setdefault("stack", library_stack(library))
    return report


def _suite_here(library: str, json_path: str) -> int:
    from conformance.runner import run as run_suite

    from ..certify import CERT_PROFILE
    return run_suite(library, CERT_PROFILE, json_path=json_path)


def _suite_in(python: str, library: str, json_path: str) -> int:
    import subprocess

    from ..certify import CERT_PROFILE, CertifyError
    command = [python, "-m", "fl_sdk", "test", library, "--profile", CERT_PROFILE, "--json", json_path]
    try:
        return subprocess.run(command).returncode
    except OSError as exc:
        raise CertifyError(f"cannot run {python}: {exc}; give the python of a venv that has the other "
                           "torch and torch-fl[sdk] installed") from exc
