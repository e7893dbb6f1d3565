"""Compile once: the first case of each kernel variant runs before the rest of a backend's cases.

A JIT kernel (Triton's, FlashInfer's) builds one binary per variant, the case fields its backend names in
``compiled_per``, on its first call in a process, and keeps it in the cache root's folders (``jit_cache``),
which every worker shares.  Handed out in the order of the suites, every worker meets the variants one by one
and builds each itself, in parallel with the others building the same ones.  So the run first hands out one
case per variant, each alone, spread over the workers, and holds each other case back until the first case of
its own variant is done (``isolation``): each variant is built once, by one worker, and its other cases find it
in the cache, while the cases of the variants already built keep the other workers busy.  These
are the run's own cases, recorded like any other; their rows say ``warm_up`` (their kernel time holds the
build) and the console gives the warm-up's wall time apart.  A variant an earlier run on the same cache root
built has no warm-up (``built_variants``).
"""

import json


def variant(case, fields: tuple) -> tuple:
    """What ``case`` compiles: its values of the backend's ``compiled_per`` fields."""
    return tuple(getattr(case, name) for name in fields)


def variant_key(case, fields: tuple) -> str:
    """``variant`` as text, as ``built_variants`` keeps it."""
    return json.dumps(list(variant(case, fields)), default=str)


def first_of_each(cases: list, fields: tuple, built: set = frozenset()) -> tuple[list, list]:
    """The first case of each variant, in the cases' order, and every other case; with no fields (a kernel
    built ahead of time, or the warm-up turned off) nothing is first, nor is a variant ``built`` names (its
    ``variant_key``: built by an earlier run on this cache root, ``built_variants``)."""
    if not fields:
        return [], list(cases)
    seen, first, rest = set(), [], []
    for case in cases:
        key = variant(case, fields)
        (rest if key in seen or (built and variant_key(case, fields) in built) else first).append(case)
        seen.add(key)
    return first, rest


def waits_on(first: list, fields: tuple):
    """For a chunk of the other cases, the ids of the first cases it waits on: one per variant it holds that has
    a first case (a variant built already, ``built_variants``, has none: its cases wait on nothing)."""
    first_of = {variant(case, fields): case.id for case in first}

    def of(chunk) -> set:
        return {first_of[key] for key in (variant(case, fields) for case in chunk) if key in first_of}
    return of
