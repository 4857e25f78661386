"""Seven-segment digits drawn at 28x28 with random shifts, stroke widths and
noise: a small, real classification task the project generates itself (no
downloads)."""
from __future__ import annotations

import torch

# Segments a..g of a seven-segment display, lit per digit.
_SEGMENTS = {0: "abcdef", 1: "bc", 2: "abdeg", 3: "abcdg", 4: "bcfg",
             5: "acdfg", 6: "acdefg", 7: "abc", 8: "abcdefg", 9: "abcdfg"}
# Each segment as (row0, row1, col0, col1) on a 20x12 glyph box.
_BOXES = {"a": (0, 2, 1, 11), "b": (1, 10, 10, 12), "c": (10, 19, 10, 12), "d": (18, 20, 1, 11),
          "e": (10, 19, 0, 2), "f": (1, 10, 0, 2), "g": (9, 11, 1, 11)}


def _glyph(digit: int) -> torch.Tensor:
    glyph = torch.zeros(20, 12)
    for segment in _SEGMENTS[digit]:
        r0, r1, c0, c1 = _BOXES[segment]
        glyph[r0:r1, c0:c1] = 1.0
    return glyph


def make_digits(count: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(images [count, 1, 28, 28] float32 in [0, 1], labels [count] int64)."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (count,), generator=gen)
    images = torch.zeros(count, 1, 28, 28)
    glyphs = [_glyph(d) for d in range(10)]
    shifts = torch.randint(0, 9, (count, 2), generator=gen)
    for i in range(count):
        top, left = int(shifts[i, 0]), int(shifts[i, 1]) + 4
        images[i, 0, top:top + 20, left:left + 12] = glyphs[int(labels[i])]
    images += 0.3 * torch.rand(images.shape, generator=gen)
    return images.clamp_(0, 1), labels
