"""`fl-sdk certify PLUGIN --key KEY`: run the cert profile and, if it passes, sign a certificate."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def register(subparsers) -> None:
    cmd = subparsers.add_parser("certify", help="run the cert profile and sign a certificate if it passes")
    cmd.add_argument("plugin", help="plugin library path, or the name of an installed plugin")
    cmd.add_argument("--key", required=True, help="the certifier's private key (fl-sdk keygen)")
    cmd.add_argument("--out", metavar="FILE", help="certificate file (default: LIBRARY.flcert beside the library, "
                     "where the runtime looks)")
    cmd.add_argument("--report", metavar="JSON", help="sign this existing cert-profile JSON report instead of "
                     "running the suite")
    cmd.add_argument("--json", metavar="FILE", help="keep the JSON report of the run here")
    cmd.add_argument("--passphrase-file", metavar="FILE",
                     help="passphrase of an encrypted key (else $FL_SDK_KEY_PASSPHRASE, else a prompt)")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from conformance.target import TargetError, resolve
    from fl_runtime.plugins.certification import default_certificate_path, sha256_of

    from ..certify import (
        CertifyError,
        certify_report,
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
        report = _read_report(args.report) if args.report else _run_cert_profile(library, sha256, args.json)
        out = certify_report(report, library, sha256, args.key, args.out or default_certificate_path(library),
                             passphrase)
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


def _run_cert_profile(library: str, sha256: str, keep_json: str | None) -> dict:
    """Run the suite's cert profile; the report, with the facts this run vouches for added."""
    import torch

    from conformance.runner import run as run_suite
    from fl_runtime.plugins.certification import sha256_of

    from ..certify import CERT_PROFILE, CertifyError, library_stack
    with tempfile.TemporaryDirectory(prefix="fl-certify-") as tmp:
        json_path = keep_json or str(Path(tmp) / "report.json")
        status = run_suite(library, CERT_PROFILE, json_path=json_path)
        report = _read_report(json_path)
    if status != 0:
        raise CertifyError(f"the {CERT_PROFILE} profile did not pass (exit status {status}); no certificate "
                           "issued: fix the failures it listed and run again")
    # The library must be the one that was hashed before the run, byte for byte.
    if sha256_of(library) != sha256:
        raise CertifyError(f"{library} changed while the suite ran; run `fl-sdk certify` again")
    report.setdefault("torch_version", torch.__version__)
    report.setdefault("plugin", {}).setdefault("sha256", sha256)
    # The stack the run used, read after it (loading the library first would put it in the
    # process the suite runs, and forks, in); recorded in the certificate.
    report.setdefault("stack", library_stack(library))
    return report
