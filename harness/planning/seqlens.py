"""Sequence-length distributions, written in case files as short strings.

Each draws the per-request prefix lengths (SGLang's ``forward_batch.seq_lens``):

- ``uniform:LO:HI``   uniform integers in [LO, HI]
- ``longtail:LO:HI``  log-uniform in [LO, HI]: many short requests, a few long
- ``equal:N``         every request has length N
- ``boundary``        page-size boundaries: each of P-1, P, P+1, 2P-1, 2P, 2P+1 and 1
- ``normal:MEAN:STD`` rounded normal, clipped to at least 1 (FlashMLA's varlen)
- ``list:A,B,...``    explicit lengths, cycled over the batch (0 makes an empty row)
"""

import math

import torch

from ..errors import InputError


def _ints(spec: str, parts: list[str], count: int) -> list[int]:
    if len(parts) != count:
        raise InputError(f"seqlen '{spec}' needs {count} number(s) after the name")
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise InputError(f"seqlen '{spec}' has a non-integer parameter") from None


def parse(spec: str) -> tuple[str, list[int]]:
    """Check a distribution spec and return ``(name, params)``."""
    if not isinstance(spec, str) or not spec:
        raise InputError(f"seqlen must be a non-empty string, got {spec!r}")
    name, *rest = spec.split(":")
    parts = rest[0].split(",") if name == "list" and rest else rest
    counts = {"uniform": 2, "longtail": 2, "equal": 1, "boundary": 0, "normal": 2}
    if name == "list":
        params = _ints(spec, parts, len(parts)) if parts and parts != [""] else []
        if not params:
            raise InputError(f"seqlen '{spec}' lists no lengths")
    elif name in counts:
        params = _ints(spec, parts, counts[name])
    else:
        raise InputError(f"unknown seqlen distribution '{name}' in '{spec}' "
                         f"(known: {', '.join([*counts, 'list'])})")
    if any(p < 0 for p in params):
        raise InputError(f"seqlen '{spec}' has a negative length")
    if name in ("uniform", "longtail") and params[0] > params[1]:
        raise InputError(f"seqlen '{spec}': LO is greater than HI")
    if name == "longtail" and params[0] < 1:
        raise InputError(f"seqlen '{spec}': longtail needs LO >= 1")
    return name, params


def max_length(spec: str, page_size: int) -> int:
    """The longest length the distribution can draw (for sizing and support checks)."""
    name, p = parse(spec)
    if name in ("uniform", "longtail"):
        return p[1]
    if name == "equal":
        return p[0]
    if name == "boundary":
        return 2 * page_size + 1
    if name == "normal":
        return p[0] + 4 * p[1]
    return max(p)


def draw(spec: str, batch_size: int, page_size: int, gen: torch.Generator) -> list[int]:
    """Draw ``batch_size`` prefix lengths with the case's CPU generator."""
    name, p = parse(spec)
    if name == "uniform":
        return torch.randint(p[0], p[1] + 1, (batch_size,), generator=gen).tolist()
    if name == "longtail":
        u = torch.rand(batch_size, generator=gen, dtype=torch.float64)
        vals = torch.exp(math.log(p[0]) + u * (math.log(p[1] + 1) - math.log(p[0]))).floor()
        return vals.long().clamp(p[0], p[1]).tolist()
    if name == "equal":
        return [p[0]] * batch_size
    if name == "boundary":
        choices = torch.tensor([1, page_size - 1, page_size, page_size + 1,
                                2 * page_size - 1, 2 * page_size, 2 * page_size + 1])
        return choices[torch.randint(0, len(choices), (batch_size,), generator=gen)].tolist()
    if name == "normal":
        vals = torch.normal(float(p[0]), float(p[1]), (batch_size,), generator=gen).round()
        return vals.long().clamp(1, p[0] + 4 * p[1]).tolist()
    return [p[i % len(p)] for i in range(batch_size)]
