"""A case's values: q and KV as models hand them to a kernel (``Case.q_values``, ``Case.kv_values``; the
names are ``planning.case.VALUES``), drawn from the case's generator.

The inputs draw q and the KV as N(0, 1) (``normal``).  Any other name reshapes the drawn tensor with further
draws on the same generator, so a case left at ``normal`` draws exactly what it always drew.  One function a
distribution, each given float32 ``x`` (rows first, a row's values last) and the request of each row:

- ``latent``: each row RMS-normalised, then per-channel gains drawn as a trained RMSNorm's are (log-normal),
  with ``d // 64`` outlier channels 50-100x the median gain;
- ``flat``: every row of a request the same (KV: all keys of a row equal, its softmax flat);
- ``zero_tiles``: a quarter of the 128-value tiles exactly zero (an fp8 writer's per-tile scale sees amax 0);
- ``tiny``: half the values in bf16's subnormal range (k * 2^-133), half in e4m3's (k * 2^-9, its seven
  subnormals: exact as e4m3 where k_scale is 1), random signs;
- ``signed_zero``: a quarter of the values +0.0 or -0.0;
- ``large`` and ``peaked`` need the other tensor: they are set from the scores each query row gets from the
  keys it reads (``key_rows``).  ``large``: q scaled row by row, or the whole KV by one factor, so that the
  largest score of a row (of the KV's largest row) is ``LARGE_SCORE`` once the softmax scale is applied: a
  kernel that skips the running-max subtraction computes exp(88) = 1.7e38, and its P·V overflows float32.
  Where the tensor's dtype cannot carry that (fp16 q against ``tiny`` keys), a vector goes as far as the
  dtype's largest value instead (``_within``), never to inf.
  ``peaked``: one key per row scores ``PEAK_SCORE`` (q: each row and head aligned with one of its keys; KV:
  one key of each row aligned with the row's heads), the others near 0.

Order: each tensor's own shape first, then the KV's ``large``/``peaked`` against the shaped q, then q's
against the shaped KV (rounded to its dtype first, so q's scores are those of the KV the kernel reads; fp8
quantises both afterwards, so there they hold within e4m3's 2^-4).
"""

import math

import torch

from ..planning.case import Case
from .key_rows import KeyRows

LARGE_SCORE = 88.0      # float32's exp overflows past 88.72: exp(88) * |v| > 3.4e38 for |v| > 2.1
PEAK_SCORE = 30.0       # the aligned key's score; the others' are about N(0, 1.3): weights under e^-20
TILE = 128              # values per tile of an fp8 writer's per-tile scale (V3.2's and the default)
OUTLIER_GAIN = (50.0, 100.0)
BF16_SUBNORMAL_STEP = 2.0 ** -133       # bf16's smallest subnormal; 127 of them lie below its smallest normal
E4M3_SUBNORMAL_STEP = 2.0 ** -9         # e4m3's smallest subnormal; 7 of them lie below 2^-6


def _uniform(shape, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(shape, generator=gen, device=gen.device)


def latent(x: torch.Tensor, gen: torch.Generator, groups: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1]
    gains = torch.exp(0.5 * torch.randn(d, generator=gen, device=gen.device))
    outliers = torch.randperm(d, generator=gen, device=gen.device)[:max(1, d // 64)]
    low, high = OUTLIER_GAIN
    gains[outliers] = gains.median() * (low + (high - low) * _uniform(len(outliers), gen))
    rms = x.square().mean(dim=-1, keepdim=True).sqrt().clamp_min(1e-6)
    return x / rms * gains


def flat(x: torch.Tensor, gen: torch.Generator, groups: torch.Tensor) -> torch.Tensor:
    """Every row of a request, every head of it, is the request's first row's first head."""
    rows = torch.arange(len(groups), device=groups.device)
    first = torch.full((int(groups.max()) + 1 if len(groups) else 1,), len(groups), device=groups.device)
    first = first.scatter_reduce(0, groups, rows, "amin")
    return x[first[groups]][:, :1].expand_as(x).clone()


def zero_tiles(x: torch.Tensor, gen: torch.Generator, groups: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1]
    zeroed = _uniform((*x.shape[:-1], -(-d // TILE)), gen) < 0.25
    return x.masked_fill(zeroed.repeat_interleave(TILE, dim=-1)[..., :d], 0.0)


def tiny(x: torch.Tensor, gen: torch.Generator, groups: torch.Tensor) -> torch.Tensor:
    in_bf16_range = _uniform(x.shape, gen) < 0.5
    steps = torch.where(in_bf16_range, torch.randint(1, 128, x.shape, generator=gen, device=gen.device)
                        * BF16_SUBNORMAL_STEP,
                        torch.randint(1, 8, x.shape, generator=gen, device=gen.device) * E4M3_SUBNORMAL_STEP)
    return torch.where(_uniform(x.shape, gen) < 0.5, -steps, steps).float()


def signed_zero(x: torch.Tensor, gen: torch.Generator, groups: torch.Tensor) -> torch.Tensor:
    zeroed, negative = _uniform(x.shape, gen) < 0.25, _uniform(x.shape, gen) < 0.5
    zeros = torch.where(negative, torch.full_like(x, -0.0), torch.zeros_like(x))
    return torch.where(zeroed, zeros, x)


def _unchanged(x, gen, groups):
    return x


# each tensor's own shape; ``large`` and ``peaked`` are set against the other tensor (``JOINT``)
OWN = {"normal": _unchanged, "latent": latent, "flat": flat, "zero_tiles": zero_tiles, "tiny": tiny,
       "signed_zero": signed_zero, "large": _unchanged, "peaked": _unchanged}


def scores(q: torch.Tensor, kv: torch.Tensor, rows: KeyRows, scale: float) -> torch.Tensor:
    """``(rows, heads, width)`` scores of q ``(rows, heads, d)`` against the keys each row reads from kv
    ``(tokens, kv_heads, d)``; -inf past a row's keys."""
    n, heads, d = q.shape
    kv_heads = kv.shape[1]
    keys = kv[rows.tokens.clamp_min(0)]                                        # (rows, width, kv_heads, d)
    s = torch.einsum("rkgd,rwkd->rkgw", q.view(n, kv_heads, heads // kv_heads, d), keys) * scale
    return s.reshape(n, heads, -1).masked_fill(~rows.valid[:, None, :], -math.inf)


def _largest(s: torch.Tensor, dims) -> tuple[torch.Tensor, torch.Tensor]:
    """The largest score over ``dims``, and the largest negated one (-inf where there is no key)."""
    return s.amax(dim=dims), torch.where(torch.isneginf(s), s, -s).amax(dim=dims)


def _toward(target: float, top: torch.Tensor, bottom: torch.Tensor) -> torch.Tensor:
    """The factor that takes the larger of ``top`` and ``-bottom`` to ``target`` (a negative one for the
    second); 1 where there is no score, or only zero ones."""
    factor = torch.where(top >= bottom, target / top, -target / bottom)
    return torch.where(torch.maximum(top, bottom) > 0, factor, torch.ones_like(factor))


def large_q(q, kv, rows: KeyRows, scale: float, gen) -> torch.Tensor:
    top, bottom = _largest(scores(q, kv, rows, scale), -1)                   # (rows, heads)
    return q * _toward(LARGE_SCORE, top, bottom)[..., None]


def large_kv(q, kv, rows: KeyRows, scale: float, gen) -> torch.Tensor:
    top, bottom = _largest(scores(q, kv, rows, scale), (0, 1, 2))
    return kv * _toward(LARGE_SCORE, top, bottom)


def _one_key_each(rows: KeyRows, per_row: int, gen) -> torch.Tensor:
    """``(rows, per_row)`` token indices: ``per_row`` keys of each row, each drawn uniformly from the row's
    keys; -1 for a row with none."""
    draws = _uniform((rows.tokens.shape[0], per_row, rows.tokens.shape[1]), gen)
    pick = draws.masked_fill(~rows.valid[:, None, :], -1.0).argmax(dim=-1)
    return torch.where(rows.valid.any(dim=1)[:, None], rows.tokens.gather(1, pick), -1)


def peaked_q(q, kv, rows: KeyRows, scale: float, gen) -> torch.Tensor:
    """Each row and head set along one of the row's keys, scaled so that key scores ``PEAK_SCORE``."""
    heads = q.shape[1]
    chosen = _one_key_each(rows, heads, gen)                                   # (rows, heads)
    kv_head = torch.arange(heads, device=q.device) // (heads // kv.shape[1])
    key = kv[chosen.clamp_min(0), kv_head]                                      # (rows, heads, d)
    norm = key.square().sum(dim=-1, keepdim=True)
    return torch.where((chosen[..., None] >= 0) & (norm > 0), key * (PEAK_SCORE / (scale * norm)), q)


def peaked_kv(q, kv, rows: KeyRows, scale: float, gen) -> torch.Tensor:
    """One key of each row set along the sum of the row's heads (per kv head, its group's), scaled so that the
    group's mean score of it is ``PEAK_SCORE``: ``c * |sum|^2 * scale / group``.  A key drawn by two rows
    goes to the later one."""
    n, heads, d = q.shape
    tokens, kv_heads = kv.shape[:2]
    group = heads // kv_heads
    chosen = _one_key_each(rows, 1, gen)[:, 0]                                 # (rows,)
    summed = q.view(n, kv_heads, group, d).sum(dim=2)                         # (rows, kv_heads, d)
    length = summed.square().sum(dim=-1, keepdim=True)
    aligned = summed * (PEAK_SCORE * group / (scale * length))
    order = torch.arange(n, device=q.device)
    slot = torch.where(chosen >= 0, chosen, tokens)                            # no key: a spare cell
    last = torch.full((tokens + 1,), -1, device=q.device).scatter_reduce(0, slot, order, "amax")
    writes = (chosen >= 0) & (last[slot] == order) & (length[:, :, 0] > 0).all(dim=1)
    out = kv.clone()
    out[chosen[writes]] = aligned[writes]
    return out


def _within(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A joint distribution's ``x`` (float32), each vector (its last dim) scaled down where its largest magnitude
    is past ``dtype``'s largest finite value, to that value; elsewhere left as it is, bit for bit.  A score the
    dtype cannot carry (``large`` q against ``tiny`` fp16 keys asks q of about 1e5, past fp16's 65504) is then
    met as nearly as it can be, and the kernel's input stays finite."""
    top = torch.finfo(dtype).max
    peak = x.abs().amax(dim=-1, keepdim=True)
    return torch.where(peak > top, x * (top / peak), x)


JOINT_Q = {"large": large_q, "peaked": peaked_q}
JOINT_KV = {"large": large_kv, "peaked": peaked_kv}


def shaped(case: Case, q: torch.Tensor, kv: torch.Tensor, rows_of, gen: torch.Generator):
    """``(q, kv)`` with the case's values: q ``(..., heads, d)`` (its rows in the key rows' order), kv
    ``(tokens, kv_heads, d)``, each in its own dtype.  ``rows_of()`` gives the ``KeyRows`` (asked only when
    a distribution needs them).  Both ``normal``: the tensors themselves, and no draw."""
    if case.q_values == "normal" and case.kv_values == "normal":
        return q, kv
    rows = rows_of()
    qf = q.reshape(-1, *q.shape[-2:]).float()
    qf = OWN[case.q_values](qf, gen, rows.row_request)
    kvf = OWN[case.kv_values](kv.float(), gen, rows.token_request)
    keys = kv.shape[0] > 0                         # an all-empty batch draws no token: nothing to score
    if case.kv_values in JOINT_KV and keys:
        kvf = _within(JOINT_KV[case.kv_values](qf, kvf, rows, case.softmax_scale, gen), kv.dtype)
    kv = kvf.to(kv.dtype)
    if case.q_values in JOINT_Q and keys:
        qf = _within(JOINT_Q[case.q_values](qf, kv.float(), rows, case.softmax_scale, gen), q.dtype)
    return qf.to(q.dtype).view(q.shape), kv


def working_bytes(case: Case, rows: int, width: int, q_elements: int, kv_elements: int) -> int:
    """The size estimate's bytes of ``shaped``'s work (0 for two ``normal`` tensors): float32 copies of both
    tensors and their results, and for ``large`` or ``peaked`` the keys each of ``rows`` query rows reads
    (``width`` of them) and their scores."""
    if case.q_values == "normal" and case.kv_values == "normal":
        return 0
    joint = case.q_values in JOINT_Q or case.kv_values in JOINT_KV
    keys = rows * width * (case.kv_heads * case.d_qk + case.heads) * 4 if joint else 0
    return (q_elements + kv_elements) * 4 * 3 + keys
