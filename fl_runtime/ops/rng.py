"""Per-device random state, owned by the runtime, not the plugin.

Each device has a (seed, offset) pair.  A random kernel receives the pair and
draws element i from a counter-based generator at counter offset + i, then the
offset advances past what it used: results depend only on the seed and the
sequence of random ops, so they are reproducible and independent per device.

Threads: reserving counters is a read-then-advance; one lock keeps two threads'
random ops from drawing the same counters (identical "random" values).
"""
from __future__ import annotations

import threading

import torch


class DeviceRNG:
    def __init__(self, device_count: int, seed: int = 0) -> None:
        self._seeds = [seed] * device_count
        self._offsets = [0] * device_count
        self._lock = threading.Lock()

    def manual_seed(self, index: int, seed: int) -> None:
        with self._lock:
            self._seeds[index] = int(seed) & 0xFFFFFFFFFFFFFFFF
            self._offsets[index] = 0

    def manual_seed_all(self, seed: int) -> None:
        for index in range(len(self._seeds)):
            self.manual_seed(index, seed)

    def initial_seed(self, index: int) -> int:
        return self._seeds[index]

    def take(self, index: int, numel: int) -> tuple[int, int]:
        """(seed, offset) for a random kernel on device `index`, reserving numel counters."""
        with self._lock:
            offset = self._offsets[index]
            self._offsets[index] = offset + (numel + 3) // 4 * 4
            return self._seeds[index] & 0x7FFFFFFFFFFFFFFF, offset

    def taker(self, index: int):
        """take() bound to one device, for the marshaler."""
        return lambda numel: self.take(index, numel)

    def get_state(self, index: int) -> torch.Tensor:
        with self._lock:
            pair = [self._seeds[index] & 0x7FFFFFFFFFFFFFFF, self._offsets[index]]
        return torch.tensor(pair, dtype=torch.int64)

    def set_state(self, index: int, state: torch.Tensor) -> None:
        seed, offset = (int(v) for v in state.to(torch.int64).tolist())
        with self._lock:
            self._seeds[index], self._offsets[index] = seed, offset


def register_seeded_dropout(library, rt) -> None:
    """aten::native_dropout for fl, built on bernoulli_ so torch.manual_seed governs it.

    native_dropout's schema has no Generator, so a vendor kernel for it gets no
    (seed, offset) and draws from its own, unseeded stream: training with
    dropout would not be reproducible.  bernoulli_ takes the generator, so the
    mask comes from this device's (seed, offset) like every other random op
    (three kernels instead of one; autograd still uses native_dropout_backward).
    """
    def native_dropout(input: torch.Tensor, p: float, train: bool | None):
        if not train or p == 0:
            return input.clone(), torch.ones_like(input, dtype=torch.bool)
        keep = torch.empty_like(input).bernoulli_(1.0 - p)
        scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
        return input * keep * scale, keep.bool()

    library.impl("native_dropout", native_dropout, "PrivateUse1")
