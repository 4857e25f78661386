"""`fl-sdk keygen KEY`: create the certifier's Ed25519 key pair (KEY and KEY.pub)."""
from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    cmd = subparsers.add_parser("keygen", help="create an Ed25519 key pair for signing certificates")
    cmd.add_argument("key", help="private key file to write (mode 0600); the public key goes to KEY.pub")
    cmd.add_argument("--force", action="store_true", help="replace an existing key pair")
    cmd.add_argument("--encrypt", action="store_true",
                     help="protect the private key with a passphrase (from --passphrase-file, "
                          "$FL_SDK_KEY_PASSPHRASE or a prompt)")
    cmd.add_argument("--passphrase-file", metavar="FILE", help="read the passphrase from FILE (implies --encrypt)")
    cmd.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..certify import CertifyError, generate_key
    from ..passphrase import PassphraseError, read_passphrase, where_to_give_it
    try:
        passphrase = None
        if args.encrypt or args.passphrase_file:
            passphrase = read_passphrase(args.passphrase_file, f"passphrase for {args.key}: ", confirm=True)
            if passphrase is None:
                raise PassphraseError(f"--encrypt needs a passphrase: give it with {where_to_give_it()}")
        private, public, kid = generate_key(args.key, overwrite=args.force, passphrase=passphrase)
    except (CertifyError, PassphraseError, OSError) as exc:
        print(f"fl-sdk keygen: {exc}", file=sys.stderr)
        return 1
    protection = "encrypted with your passphrase" if passphrase else "not encrypted: keep it secret"
    print(f"private key: {private} ({protection})\npublic key:  {public} (give this to users: "
          f"certification.trusted_keys)\nkey id:      {kid}")
    return 0
