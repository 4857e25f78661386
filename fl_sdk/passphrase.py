"""Where a private key's passphrase comes from: a file, the environment, or the terminal.

In that order, so that CI jobs (a secret in an environment variable or a mounted
file) and people at a terminal (a prompt, never echoed) both work, and a passphrase
never has to appear on a command line, where `ps` and shell history would keep it.
"""
from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path

PASSPHRASE_ENV = "FL_SDK_KEY_PASSPHRASE"


class PassphraseError(RuntimeError):
    """No usable passphrase (none given, an empty one, or two prompts that differ)."""


def where_to_give_it() -> str:
    return f"--passphrase-file FILE, the {PASSPHRASE_ENV} environment variable, or a terminal prompt"


def read_passphrase(file: str | None, prompt: str, confirm: bool = False) -> bytes | None:
    """The passphrase from `file`, else $FL_SDK_KEY_PASSPHRASE, else a prompt when stdin is a
    terminal (twice when `confirm`); None when none of them is available."""
    if file:
        try:
            text = Path(file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise PassphraseError(f"cannot read passphrase file {file}: {exc}") from exc
        return _non_empty(text, f"passphrase file {file}")
    if os.environ.get(PASSPHRASE_ENV):
        return _non_empty(os.environ[PASSPHRASE_ENV], PASSPHRASE_ENV)
    if not sys.stdin.isatty():
        return None
    first = getpass.getpass(prompt)
    if confirm and getpass.getpass("again: ") != first:
        raise PassphraseError("the two passphrases differ; nothing was written")
    return _non_empty(first, "the passphrase typed")


def _non_empty(text: str, source: str) -> bytes:
    if not text:
        raise PassphraseError(f"{source} is empty; an empty passphrase would protect nothing")
    return text.encode()
