"""Which torchrun attempt this process belongs to, for keys on the c10d store.

torchrun keeps its store across restarts (--max-restarts), so the keys a failed
attempt wrote (the dead ranks' Gloo addresses, a vendor communicator's unique id)
are still there: a rank that reads one before the new attempt's peer has written
its own connects to a dead address, or waits forever in a communicator nobody
else joins.  Every rendezvous key of the fl process group carries the attempt
number torchrun gives every worker of an attempt, so attempts never mix.
"""
from __future__ import annotations

import os


def attempt_scope() -> str:
    """A store-key segment naming this torchrun attempt ("0" outside torchrun)."""
    return f"attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
