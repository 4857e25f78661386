"""`fl-sdk verify PLUGIN --trusted-key PUB`: check a plugin's certificate; exit 0 only when valid."""
from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    cmd = subparsers.add_parser("verify", help="check a plugin's certificate against trusted public keys")
    cmd.add_argument("plugin", help="plugin library path, plugin project directory, or an installed plugin's name")
    cmd.add_argument("--certificate", metavar="FILE", help="certificate file (default: LIBRARY.flcert)")
    cmd.add_argument("--trusted-key", metavar="PUB", action="append", required=True, dest="trusted_keys",
                     help="a trusted Ed25519 public key file (PEM or raw); repeat for several")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from conformance.target import TargetError, resolve
    from fl_runtime.plugins.certification import default_certificate_path, trust_store, verify_certificate
    from fl_runtime.errors import ConfigError
    try:
        library = resolve(args.plugin).path
        keys = trust_store(args.trusted_keys, config_key="--trusted-key")
    except (TargetError, ConfigError) as exc:
        print(f"fl-sdk verify: {exc}", file=sys.stderr)
        return 2
    certificate = args.certificate or default_certificate_path(library)
    status = verify_certificate(certificate, library, keys)
    if not status.certified:
        print(f"NOT CERTIFIED ({status.code}): {status.reason}", file=sys.stderr)
        return 1
    print(f"{library}: {status.reason}\ncertificate: {status.certificate}\ncoverage: {status.coverage}")
    return 0
