"""How bytes move between ranks: the one interface a collective library plugs into.

The fl process group (process_group.py) speaks torch.distributed's surface and
hands each collective to a *wire*: an object with PyTorch's c10d collective
methods (`allreduce`, `broadcast`, `allgather`, ...) that accepts tensors of
`Transport.device_type`.  When that is "cpu", the process group stages fl
tensors through the host (device -> host before the call, host -> device when
the wire's future completes); a vendor transport that reaches its chips'
interconnect directly would declare "fl" and receive the device tensors as
they are.  That is the whole contract a later "vendor collectives" ABI has to
meet (docs/users/distributed.md).

Today's transport is Gloo on host copies (`HostGlooTransport`), the library
PyTorch itself uses for CPU tensors.
"""
from __future__ import annotations

import abc
import datetime

import torch.distributed as dist

from fl_runtime.integration.distributed.elastic import attempt_scope


class Transport(abc.ABC):
    """A collective library for one process group: connect() once, then the wire's methods."""

    #: Device type of the tensors the wire takes; "cpu" makes the process group stage fl tensors.
    device_type: str = "cpu"
    #: Shown in errors and `FLProcessGroup.transport_name`.
    name: str = "transport"

    @abc.abstractmethod
    def connect(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta,
                group_name: str) -> object:
        """Rendezvous with the other ranks through `store`; return the wire (c10d collective methods)."""


class HostGlooTransport(Transport):
    """Gloo over TCP on host tensors: PyTorch's own CPU collectives, any dtype Gloo knows."""

    device_type = "cpu"
    name = "gloo (host-staged)"

    def connect(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta,
                group_name: str) -> dist.ProcessGroupGloo:
        # A prefix of its own keeps Gloo's rendezvous keys apart from anything else on the
        # store, and from an earlier torchrun attempt's (elastic.py).
        wire = dist.ProcessGroupGloo(dist.PrefixStore(f"fl-gloo/{attempt_scope()}/", store), rank, size, timeout)
        wire.options.group_name = group_name
        wire._set_sequence_number_for_group()
        return wire


def default_transport() -> Transport:
    """The transport a new fl process group uses (the only one until the ABI has collectives)."""
    return HostGlooTransport()
