"""`fl-sdk keygen KEY`: create the certifier's Ed25519 key pair (KEY and KEY.pub)."""
from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    cmd = subparsers.add_parser("keygen", help="create an Ed25519 key pair for signing certificates")
    cmd.add_argument("key", help="private key file to write (mode 0600); the public key goes to KEY.pub")
    cmd.add_argument("--force", action="store_true", help="replace an existing key pair")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..certify import CertifyError, generate_key
    try:
        private, public, kid = generate_key(args.key, overwrite=args.force)
    except (CertifyError, OSError) as exc:
        print(f"fl-sdk keygen: {exc}", file=sys.stderr)
        return 1
    print(f"private key: {private} (keep it secret)\npublic key:  {public} (give this to users: "
          f"certification.trusted_keys)\nkey id:      {kid}")
    return 0
