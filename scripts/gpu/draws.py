"""Are normal draws made in bf16/fp16 on a GPU the same bits as float32 draws rounded (``inputs.draw_normal``)?
Shapes up to the largest float32 draw torch makes in one piece (``inputs.FLOAT32_DRAW_IN_ONE`` elements).

Usage: python scripts/gpu/draws.py  (exit 0: the same for every shape and seed tried, 1: they differ)
"""
import sys

import torch

from harness.building.inputs import FLOAT32_DRAW_IN_ONE

# the last: as large as one piece gets (932,067 tokens of 576, just under 2^31 float32 bytes)
SHAPES = [(1,), (3, 5), (1, 1, 1, 576), (64, 4, 128, 576), (262144, 1, 576), (1000, 3, 576), (20, 8, 576),
          (932067, 1, 576)]
assert 932067 * 576 <= FLOAT32_DRAW_IN_ONE < 932068 * 576
found = 0
for dtype in (torch.bfloat16, torch.float16):
    for shape in SHAPES:
        for seed in (0, 17, 12345):
            a = torch.Generator(device="cuda").manual_seed(seed)
            b = torch.Generator(device="cuda").manual_seed(seed)
            rounded = [torch.randn(shape, generator=a, device="cuda").to(dtype) for _ in range(2)]
            direct = [torch.randn(shape, generator=b, device="cuda", dtype=dtype) for _ in range(2)]
            same = all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(rounded, direct))
            found += not same
            if not same:
                print(f"differ: {dtype} {shape} seed {seed}")
print(f"{found} difference(s) over {2 * len(SHAPES) * 3} dtype/shape/seed triples (two draws each)")
sys.exit(1 if found else 0)
