"""Ops the runtime implements itself, calling vendor kernels for their device part: copies, factories, fused attention, foreach, RNG and dropout, fused RNN cells."""
