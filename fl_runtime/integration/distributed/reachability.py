"""Which peers a failed cross-host collective could not reach (docs/users/multi-host.md, "Failures").

Gloo reports a lost host as a timeout ("Timed out waiting ... for recv") that
names no peer.  So every process in a group that spans hosts listens on a TCP
port of its own (a thread accepts and closes; nothing is read or written) and
publishes its address on the c10d store with the group's other keys.  When a
collective between hosts fails, the rank knocks on each peer's port (all at
once, PROBE_SECONDS at most): a peer whose port does not answer is
unreachable (its host or the network is down), one that refuses has lost its
process, one that answers is alive (then it is stuck or called something
else).  The address is the one this process uses towards the c10d store's
host, which is on the network the job spans.
"""
from __future__ import annotations

import concurrent.futures
import datetime
import errno
import json
import os
import socket
import threading
from dataclasses import dataclass

import torch.distributed as dist

from fl_runtime.integration.distributed.elastic import attempt_scope

#: What diagnosing may take (at most a quarter of the group's timeout): the group's wires give
#: up this much earlier than its timeout and a knock waits 3/4 of it, so that the error,
#: diagnosis included, arrives within the timeout.
PROBE_SECONDS = 1.0
_PREFIX = "fl-reach/"

_lock = threading.Lock()
_listeners: dict[str, socket.socket] = {}      # by local address


@dataclass(frozen=True)
class Peer:
    rank: int
    host: str           # hostname, for messages
    address: str
    port: int


class Reachability:
    """This rank's view of its peers' liveness ports in one group."""

    def __init__(self, peers: list[Peer], timeout: datetime.timedelta) -> None:
        self._peers = peers
        budget = min(PROBE_SECONDS, timeout.total_seconds() / 4)
        self.seconds = 0.75 * budget              # a knock's wait
        #: The timeout the group's wires get: the diagnosis's budget less than the group's.
        self.wire_timeout = timeout - datetime.timedelta(seconds=budget)

    @classmethod
    def exchange(cls, store: dist.Store, rank: int, size: int, group_name: str,
                 timeout: datetime.timedelta) -> Reachability:
        """Publish this process's port on `store`, read every other rank's (a collective of the group)."""
        store = dist.PrefixStore(f"{_PREFIX}{attempt_scope()}/{group_name}/", store)
        address, port = _listen(_address_towards(store))
        store.set(str(rank), json.dumps([socket.gethostname(), address, port]))
        peers = []
        for r in range(size):
            if r != rank:
                host, peer_address, peer_port = json.loads(store.get(str(r)).decode())
                peers.append(Peer(r, host, peer_address, peer_port))
        return cls(peers, timeout)

    def diagnose(self, ranks: list[int] | None = None) -> str:
        """Knock on the peers (`ranks`, default all): a sentence naming those that do not answer."""
        peers = [p for p in self._peers if ranks is None or p.rank in ranks]
        if not peers:
            return ""
        with concurrent.futures.ThreadPoolExecutor(len(peers), thread_name_prefix="torch-fl-probe") as pool:
            answers = list(pool.map(self._knock, peers))
        lost = [f"rank {p.rank} on host {p.host} ({p.address}) {answer}"
                for p, answer in zip(peers, answers) if answer != "answers"]
        if not lost:
            return f"every peer answered within {self.seconds:g} s (a rank may be stuck, not unreachable)"
        return "; ".join(lost)

    def _knock(self, peer: Peer) -> str:
        try:
            with socket.create_connection((peer.address, peer.port), timeout=self.seconds):
                return "answers"
        except ConnectionRefusedError:
            return "is reachable but its process is gone (connection refused)"
        except OSError as exc:
            if isinstance(exc, TimeoutError) or exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT):
                return f"is unreachable (no answer within {self.seconds:g} s: its host or the network is down)"
            return f"is unreachable ({exc})"


def _address_towards(store: dist.Store) -> str:
    """The local address this process uses to reach the store's host (the job's network)."""
    host = _store_host(store) or os.environ.get("MASTER_ADDR")
    if not host:
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))           # no packet is sent: the kernel only picks a route
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _store_host(store) -> str | None:
    for _ in range(8):                    # PrefixStores around the TCPStore
        host = getattr(store, "host", None)
        if isinstance(host, str) and host:
            return host
        store = getattr(store, "underlying_store", None)
        if store is None:
            return None
    return None


def _listen(address: str) -> tuple[str, int]:
    """This process's liveness port on `address` (one per process and address, made on first use)."""
    with _lock:
        sock = _listeners.get(address)
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((address, 0))
            sock.listen(64)
            threading.Thread(target=_accept, args=(sock,), name="torch-fl-liveness", daemon=True).start()
            _listeners[address] = sock
        return sock.getsockname()


def _accept(sock: socket.socket) -> None:
    """Answer every knock: accept, close (the connection itself is the answer)."""
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        conn.close()
