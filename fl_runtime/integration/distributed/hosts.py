"""Which ranks of a process group share a host (docs/users/multi-host.md, "Same host").

A vendor communicator that declares FL_COMM_REACH_HOST (fl_abi.h, fl_comm_reach)
may join only ranks of one host, so every group learns its layout when it is
made: each rank publishes its host identity on the c10d store and reads the
others'.  The identity is what a host-local transport shares: the kernel (its
boot id), the hostname, the network namespace, and the filesystem POSIX
shared memory lives on (/dev/shm).  Two containers or network
namespaces on one machine, each with its own /dev/shm, are two hosts, as they
are to a shared-memory transport; processes that share all of these are one.
The launcher's node rank (torchrun's GROUP_RANK) is not used: it exists only
under torchrun, and two agents on one machine would count as two hosts while
nothing says two agents are on different machines.  TORCH_FL_HOST_ID, when
set, replaces the identity (for set-ups it gets wrong, as NCCL_HOSTID does).
"""
from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass

import torch.distributed as dist

from fl_runtime.integration.distributed.elastic import attempt_scope

HOST_ID_ENV = "TORCH_FL_HOST_ID"
_PREFIX = "fl-hosts/"


def host_identity() -> str:
    """This process's host: boot id, network namespace and /dev/shm filesystem, or TORCH_FL_HOST_ID."""
    override = os.environ.get(HOST_ID_ENV)
    if override:
        return override
    return "/".join((_read("/proc/sys/kernel/random/boot_id"), socket.gethostname(),
                     _inode("/proc/self/ns/net"), _device("/dev/shm")))


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "-"


def _inode(path: str) -> str:
    try:
        return str(os.stat(path).st_ino)
    except OSError:
        return "-"


def _device(path: str) -> str:
    try:
        return str(os.stat(path).st_dev)
    except OSError:
        return "-"


@dataclass(frozen=True)
class HostLayout:
    """The ranks of a group by host; hosts are numbered in the order of their lowest rank."""
    hosts: tuple[tuple[int, ...], ...]     # the ranks on each host, ascending
    names: tuple[str, ...]                 # each host's hostname, for messages

    @classmethod
    def exchange(cls, store: dist.Store, rank: int, size: int, group_name: str) -> HostLayout:
        """Publish this rank's host on `store` and read every rank's (a collective of the group)."""
        store = dist.PrefixStore(f"{_PREFIX}{attempt_scope()}/{group_name}/", store)
        store.set(str(rank), json.dumps([host_identity(), socket.gethostname()]))
        seen: dict[str, list[int]] = {}
        names: dict[str, str] = {}
        for r in range(size):
            identity, name = json.loads(store.get(str(r)).decode())
            seen.setdefault(identity, []).append(r)
            names.setdefault(identity, name)
        return cls(tuple(tuple(ranks) for ranks in seen.values()), tuple(names[i] for i in seen))

    @property
    def spans_hosts(self) -> bool:
        return len(self.hosts) > 1

    @property
    def uniform(self) -> bool:
        """Every host has as many ranks as the others."""
        return len({len(ranks) for ranks in self.hosts}) == 1

    def host_of(self, rank: int) -> int:
        return next(h for h, ranks in enumerate(self.hosts) if rank in ranks)

    def describe(self, host: int) -> str:
        ranks = self.hosts[host]
        return f"host {self.names[host]} (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"
