"""Per-device random state, owned by the runtime, not the plugin.

Each device has a (seed, offset) pair.  A random kernel receives the pair and
draws element i from a counter-based generator at counter offset + i, then the
offset advances past what it used: results depend only on the seed and the
sequence of random ops, so they are reproducible and independent per device.

Threads: reserving counters is a read-then-advance; one lock keeps two threads'
random ops from drawing the same counters (identical "random" values).
"""
from __future__ import annotations

import struct
import threading

import torch

from fl_runtime.ops.schema import generator_slot


SEED_MASK = 0x7FFFFFFFFFFFFFFF        # kernels take the seed as an int64
UINT64_MASK = 0xFFFFFFFFFFFFFFFF    # seeds as torch.Generator keeps them
STAND_IN_COUNTERS = 4                 # what a CPU stand-in reserves: one Philox round, the least a draw takes
_STATE = struct.Struct("<QQ")          # seed, offset: a generator's state bytes (CUDA's layout)


def state_bytes(seed: int, offset: int) -> torch.Tensor:
    """A device's RNG state as torch.fl.get_rng_state() and torch.Generator.get_state() give it:
    16 bytes, the seed then the offset, each a little-endian uint64."""
    return torch.frombuffer(bytearray(_STATE.pack(seed & UINT64_MASK, offset)), dtype=torch.uint8)


def parse_state(state: torch.Tensor) -> tuple[int, int]:
    """(seed, offset) from state_bytes(), or from the int64 pair Torch-FL gave before."""
    if state.dtype == torch.uint8 and state.numel() == _STATE.size:
        return _STATE.unpack(bytes(state.contiguous().tolist()))
    if state.dtype == torch.int64 and state.numel() == 2:
        seed, offset = (int(v) for v in state.tolist())
        return seed, offset
    raise ValueError(f"an fl RNG state is {_STATE.size} uint8 bytes (get_rng_state() gives one), got "
                     f"{state.numel()} {state.dtype} values")


class DeviceRNG:
    """The Python route's RNG: a (seed, offset) pair per device (the native bridge keeps the same
    pairs in each device's default torch.Generator, fl_runtime/bridge/rng.py)."""

    def __init__(self, device_count: int, seed: int = 0) -> None:
        self._seeds = [seed] * device_count
        self._offsets = [0] * device_count
        self._lock = threading.Lock()

    def manual_seed(self, index: int, seed: int) -> None:
        with self._lock:
            self._seeds[index] = int(seed) & UINT64_MASK
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
            return self._seeds[index] & SEED_MASK, offset

    def taker(self, index: int):
        """take() bound to one device, for the marshaler: take(numel, generator); an explicit
        generator cannot be an fl one here (ops/eager/marshal.py sends CPU ones to the CPU)."""
        return lambda numel, generator=None: self.take(index, numel)

    def get_state(self, index: int) -> torch.Tensor:
        with self._lock:
            return state_bytes(self._seeds[index], self._offsets[index])

    def set_state(self, index: int, state: torch.Tensor) -> None:
        seed, offset = parse_state(state)
        with self._lock:
            self._seeds[index], self._offsets[index] = seed, offset


def cpu_stand_in(take, generator: torch.Generator | None) -> torch.Generator:
    """A CPU generator for an op that runs on the CPU (the CPU fallback) with an fl generator
    (None: the device's default one), which PyTorch's CPU kernels refuse.  It is seeded from the
    counters `take(numel, generator)` reserves from the fl generator: the values follow that generator's seed and the sequence of
    random ops (reproducible, never drawn twice, safe under threads, as `take` is), and the fl
    generator advances as if a kernel had drawn.  They are not what a vendor kernel would draw."""
    seed, offset = take(STAND_IN_COUNTERS, generator)
    return torch.Generator().manual_seed(_splitmix64(seed ^ _splitmix64(offset)))


def stand_ins_for_cpu(op: torch._ops.OpOverload, args: tuple, kwargs: dict, take) -> tuple[tuple, dict]:
    """The arguments of a random op about to run on the CPU (the CPU fallback), whose kernels
    take CPU generators only.  Its generator becomes a cpu_stand_in drawn through `take` from
    the explicit fl generator passed or, with none, from the device's default generator, so
    torch.fl.manual_seed and set_rng_state govern it as they govern a vendor kernel
    (docs/users/devices.md "Random numbers").  An explicit CPU generator stays: the op draws
    on its own device with it, as its seed asks."""
    slot = generator_slot(op)
    if slot is None:
        return args, kwargs
    position, name, kwarg_only = slot
    if not kwarg_only and position < len(args):
        if not _on_cpu(args[position]):
            args = (*args[:position], cpu_stand_in(take, args[position]), *args[position + 1:])
    elif not _on_cpu(kwargs.get(name)):
        kwargs = {**kwargs, name: cpu_stand_in(take, kwargs.get(name))}
    return args, kwargs


def _on_cpu(generator: torch.Generator | None) -> bool:
    return generator is not None and generator.device.type == "cpu"


def _splitmix64(value: int) -> int:
    """A 64-bit mix (splitmix64's finaliser): nearby (seed, offset) pairs give unrelated seeds."""
    value = (value + 0x9E3779B97F4A7C15) & UINT64_MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & UINT64_MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & UINT64_MASK
    return value ^ (value >> 31)


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
