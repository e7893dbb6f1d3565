"""Smaller versions of a case, one kind of step at a time (``STEPS``), for ``shrink``.

Every candidate is a valid case (``case_checks``) smaller than the one it came from in one respect.  The
lengths are explicit (``explicit``: ``list:`` or ``equal:``, an extra cache's entries too unless they are
``ratio:N``), so dropping a request drops its lengths, and a shorter context is a shorter number.
"""

import dataclasses

from ..errors import InputError
from ..planning.case import CASE_DEFAULTS, EXTRA_FIELDS, SPARSE_FIELDS, Case
from ..planning.case_checks import validate_case
from ..planning.case_lengths import cache_seqlens_for, draw_seq_lens, extra_entries, extra_ratio
from .space import EXTRA_TOPK_MULTIPLE


def lengths_of(case: Case) -> list[int]:
    """Each request's prefix length (SGLang's ``seq_lens``), as the case draws them."""
    return draw_seq_lens(case)


def extra_lengths_of(case: Case) -> list[int] | None:
    """Each request's entries in the extra cache where they are a spec of their own; None without an extra
    cache or with ``ratio:N`` (they follow the requests' lengths then)."""
    if not case.extra_topk or extra_ratio(case):
        return None
    return extra_entries(case, cache_seqlens_for(case, lengths_of(case)))


def extra_total(case: Case) -> int:
    """Entries of the extra cache over all requests (0 without one)."""
    return sum(extra_entries(case, cache_seqlens_for(case, lengths_of(case)))) if case.extra_topk else 0


def lengths_spec(lengths: list[int]) -> str:
    """The distribution that gives exactly ``lengths``: ``equal:N`` where they are all one length."""
    return f"equal:{lengths[0]}" if len(set(lengths)) == 1 else "list:" + ",".join(map(str, lengths))


def explicit(case: Case) -> Case:
    """The case with its drawn lengths written out (and read as the prefix), so they no longer hang on
    its seed: the same requests, whatever seed a suite file gives it."""
    lengths, extra = lengths_of(case), extra_lengths_of(case)
    fields = {} if extra is None else {"extra_seqlen": lengths_spec(extra)}
    return dataclasses.replace(case, seqlen=lengths_spec(lengths), seqlen_is_cache=False, **fields)


def changed(case: Case, **fields) -> Case | None:
    """``case`` with ``fields``, or None where that is no valid case (or no change)."""
    try:
        new = validate_case(dataclasses.replace(case, **fields), "shrink candidate")
    except (InputError, ValueError):
        return None
    return None if new == case else new


def with_lengths(case: Case, lengths: list[int], extra: list[int] | None = None) -> Case | None:
    """The case with these requests' lengths (and, given, their extra cache's entries)."""
    if not lengths:
        return None
    fields = {} if extra is None else {"extra_seqlen": lengths_spec(extra)}
    return changed(case, batch_size=len(lengths), seqlen=lengths_spec(lengths), **fields)


def smaller(n: int, least: int = 0) -> list[int]:
    """Values below ``n`` worth trying, smallest first: ``least``, powers of two, half, and ``n`` less a power
    of two (n - 1, n - 2, n - 4, ...), so a threshold is closed in on in a few steps."""
    powers = [1 << k for k in range(n.bit_length())]
    values = {least, n // 2, *powers, *(n - p for p in powers)}
    return sorted(v for v in values if least <= v < n)


def fewer_requests(case: Case) -> list[Case]:
    """One request alone, each half, each request left out."""
    lengths, extra = lengths_of(case), extra_lengths_of(case)
    b = len(lengths)
    if b < 2:
        return []
    kept = [[i] for i in range(b)] + [list(range(b // 2)), list(range(b // 2, b))]
    kept += [[j for j in range(b) if j != i] for i in range(b)]
    out = [with_lengths(case, [lengths[i] for i in k], None if extra is None else [extra[i] for i in k])
           for k in kept]
    return [c for c in out if c is not None]


def shorter_contexts(case: Case) -> list[Case]:
    """Every request at one shorter length, then each request shorter alone."""
    lengths = lengths_of(case)
    out = [with_lengths(case, [v] * len(lengths)) for v in smaller(max(lengths, default=0))]
    for i, n in enumerate(lengths):
        out += [with_lengths(case, lengths[:i] + [v] + lengths[i + 1:]) for v in smaller(n)]
    return [c for c in out if c is not None]


def fewer_heads(case: Case) -> list[Case]:
    """Fewer query heads (kv heads kept where they still divide them, else one)."""
    return [c for h in smaller(case.heads, least=1)
            if (c := changed(case, heads=h, kv_heads=case.kv_heads if h % case.kv_heads == 0 else 1))]


def fewer_drafts(case: Case) -> list[Case]:
    """Decode, then fewer draft tokens."""
    if case.mode != "verify":
        return []
    out = [changed(case, mode="decode", draft_tokens=1)]
    out += [changed(case, draft_tokens=d) for d in smaller(case.draft_tokens, least=1)]
    return [c for c in out if c is not None]


def smaller_topk(case: Case) -> list[Case]:
    return [c for k in smaller(case.topk, least=1) if (c := changed(case, topk=k))] if case.topk else []


def simpler_extra(case: Case) -> list[Case]:
    """DeepSeek V4's fields: no extra cache (every extra field back to its default), a narrower one (in
    multiples of 64 where its width is one: FlashMLA's), no per-row lengths (both, then each), fewer entries."""
    out = [changed(case, topk_length="none", extra_topk_length="none"), changed(case, topk_length="none"),
           changed(case, extra_topk_length="none")]
    if case.extra_topk:
        out.append(changed(case, **{f: CASE_DEFAULTS[f] for f in EXTRA_FIELDS}))
        unit = EXTRA_TOPK_MULTIPLE if case.extra_topk % EXTRA_TOPK_MULTIPLE == 0 else 1
        out += [changed(case, extra_topk=n * unit) for n in smaller(case.extra_topk // unit, least=1)]
        out += fewer_extra_entries(case)
    return [c for c in out if c is not None]


def fewer_extra_entries(case: Case) -> list[Case | None]:
    """``ratio:N``: a larger N (N times 2, 4, ... until no request has an entry); entries of their own: every
    request at one smaller count, then each request's fewer alone."""
    ratio = extra_ratio(case)
    if ratio:
        longest = max(cache_seqlens_for(case, lengths_of(case)), default=0)
        return [changed(case, extra_seqlen=f"ratio:{ratio << k}")
                for k in range(1, (longest // ratio).bit_length() + 1)]
    lengths, extra = lengths_of(case), extra_lengths_of(case)
    out = [with_lengths(case, lengths, [v] * len(extra)) for v in smaller(max(extra, default=0))]
    for i, n in enumerate(extra):
        out += [with_lengths(case, lengths, extra[:i] + [v] + extra[i + 1:]) for v in smaller(n)]
    return out


def fewer_pages(case: Case) -> list[Case]:
    """No extra pages, no spread pool and no shared prefix (together, then each), then fewer of each."""
    P = case.page_size
    out = [changed(case, extra_pages=0, pool_pages=0, shared_prefix=0), changed(case, extra_pages=0),
           changed(case, pool_pages=0), changed(case, shared_prefix=0)]
    out += [changed(case, extra_pages=n) for n in smaller(case.extra_pages)]
    out += [changed(case, shared_prefix=n * P) for n in smaller(case.shared_prefix // P)]
    return [c for c in out if c is not None]


# a field reset to its default with the fields it takes along (a decode has one query token; a dense case
# has no sparse fields; the V3.2 record holds 576 values, with its own scale policy, and no V4 fields, which
# FlashMLA refuses with it; no extra cache has no extra fields)
COMPANIONS = {"mode": ("draft_tokens",), "scenario": SPARSE_FIELDS + EXTRA_FIELDS,
              "kv_format": ("kv_scales", "d_qk", "topk_length", *EXTRA_FIELDS), "d_qk": ("d_v",), "dtype": ("k_scale",),
              "page_size": ("shared_prefix", "pool_pages"), "extra_topk": EXTRA_FIELDS[1:]}
# fields the other steps make smaller, whose default may be larger (heads 16, batch 4, extra pages 4) or is
# no value alone (an extra cache's entries)
SIZED = {"id", "seed", "suite_file", "tags", "batch_size", "seqlen", "seqlen_is_cache", "heads",
         "draft_tokens", "topk", "extra_pages", "pool_pages", "shared_prefix", "extra_seqlen"}


def back_to_defaults(case: Case) -> list[Case]:
    """Every remaining field at its ``Case`` default at once, every one but one (where one field is what
    the failure needs), then each alone; a field with its companions."""
    fields = [f for f in CASE_DEFAULTS if f not in SIZED and getattr(case, f) != CASE_DEFAULTS[f]]
    resets = [{f: CASE_DEFAULTS[f] for f in (name, *COMPANIONS.get(name, ()))} for name in fields]
    groups = [resets] if len(resets) > 1 else []
    groups += [resets[:i] + resets[i + 1:] for i in range(len(resets))] if len(resets) > 2 else []
    groups += [[reset] for reset in resets]
    out = [changed(case, **{k: v for reset in group for k, v in reset.items()}) for group in groups]
    return [c for c in out if c is not None]


STEPS = (("requests", fewer_requests), ("contexts", shorter_contexts), ("heads", fewer_heads),
         ("drafts", fewer_drafts), ("topk", smaller_topk), ("extra", simpler_extra), ("pages", fewer_pages),
         ("defaults", back_to_defaults))


def non_defaults(case: Case) -> int:
    return sum(getattr(case, f) != CASE_DEFAULTS[f] for f in CASE_DEFAULTS if f not in ("id", "seed", "suite_file"))


def size_key(case: Case) -> tuple:
    """Smaller is simpler: fewer requests, fewer keys (an extra cache's entries too), heads, query tokens,
    index entries (both caches'), pages, fields set."""
    return (case.batch_size, sum(lengths_of(case)) + extra_total(case), case.heads, case.s_q,
            case.topk + case.extra_topk,
            case.extra_pages + case.pool_pages + case.shared_prefix // case.page_size, non_defaults(case))
