"""The runtime's RNG on the native bridge: each device's default torch.Generator.

Same contract as the Python route's DeviceRNG (ops/owned/rng.py): a (seed, offset) pair per device,
numbers reserved in steps of four per random kernel.  Here the pair lives in the C++
generator PyTorch itself hands out (torch.fl's seeding functions, torch.manual_seed,
Generator objects, checkpoints all see one state), and explicit torch.Generator(device="fl")
objects draw the same way.
"""
from __future__ import annotations

import torch

from fl_runtime.ops.owned.rng import UINT64_MASK, parse_state, state_bytes


class NativeRNG:
    def __init__(self, bridge, device_count: int) -> None:
        self._reserve = bridge.reserve
        self.generators = [bridge.default_generator(i) for i in range(device_count)]

    def manual_seed(self, index: int, seed: int) -> None:
        self.generators[index].manual_seed(int(seed) & UINT64_MASK)

    def manual_seed_all(self, seed: int) -> None:
        for index in range(len(self.generators)):
            self.manual_seed(index, seed)

    def initial_seed(self, index: int) -> int:
        return self.generators[index].initial_seed()

    def take(self, index: int, numel: int) -> tuple[int, int]:
        return self._reserve(self.generators[index], numel)

    def taker(self, index: int):
        default = self.generators[index]
        return lambda numel, generator=None: self._reserve(default if generator is None else generator, numel)

    def get_state(self, index: int) -> torch.Tensor:
        return self.generators[index].get_state()

    def set_state(self, index: int, state: torch.Tensor) -> None:
        self.generators[index].set_state(state_bytes(*parse_state(state)))
