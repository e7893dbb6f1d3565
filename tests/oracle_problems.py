"""Random paged problems for the batched oracle's tests (``tests/reference/test_batched_oracle.py``) and the
widening kernel's GPU test (``tests/fast/test_widen_kernel.py``): pools poisoned outside the requests."""

import numpy as np
import torch

from reference import Problem, keysets, quantize_fp8


def random_problem(seed, causal, s_q, heads, lengths, fp8=False, page_size=64, d_qk=40, d_v=32):
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    pages_per = [max(1, -(-n // page_size)) for n in lengths]
    num_pages = 1 + sum(pages_per) + 2
    pool = torch.full((num_pages, page_size, 1, d_qk), float("nan"))         # poison outside the requests
    order = torch.randperm(num_pages - 1, generator=g)[:sum(pages_per)] + 1
    width = max(pages_per) + 1
    table = np.full((b, width), -1, dtype=np.int32)                           # padding past each request
    at = 0
    for r, (n, k) in enumerate(zip(lengths, pages_per)):
        table[r, :k] = order[at:at + k].numpy()
        at += k
        flat = pool[torch.from_numpy(table[r, :k]).long()].reshape(-1, 1, d_qk)
        flat[:n] = torch.randn(n, 1, d_qk, generator=g)
        pool[torch.from_numpy(table[r, :k]).long()] = flat.reshape(k, page_size, 1, d_qk)
    q = torch.randn(b, s_q, heads, d_qk, generator=g)
    descale = None
    if fp8:
        descale = 0.05
        pool, q = quantize_fp8(pool, descale), quantize_fp8(q, descale)
    else:
        pool, q = pool.to(torch.bfloat16), q.to(torch.bfloat16)
    keys = keysets.dense(table, lengths, page_size, s_q, causal)
    return Problem(q, pool, keys, d_qk ** -0.5, d_v, descale, descale)


def problems(d_qk=40, d_v=32):
    """14 problems; the widening kernel's test asks for widths it takes (multiples of its 64-value block)."""
    gen = np.random.default_rng(0)
    made = []
    for i in range(14):
        b = int(gen.integers(1, 5))
        lengths = [int(n) for n in gen.choice([0, 1, 3, 63, 64, 65, 200, 256, 300, 700], size=b)]
        made.append(random_problem(i, causal=bool(i % 2), s_q=int(gen.choice([1, 2])), heads=4,
                                   lengths=lengths, fp8=i % 5 == 4, d_qk=d_qk, d_v=d_v))
    return made
