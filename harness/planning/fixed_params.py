"""Parameters a kernel fixes: it takes no argument for them and computes at its own value.

Declared as data in a backend's ``Capabilities`` (``fixed_softmax_scale``: a
positive number, or a rule of the case's shape named in ``SCALE_RULES``).  Every
case then runs at the kernel's value: the oracle computes at it
(``conventions.kernel_view``) and the row records the case as it ran
(``as_run``: its definition and hash) with the change (``fixed_by_kernel``).
No torch here: the report reads rows with ``describe_fixed``.
"""

import dataclasses
import math

# A softmax scale a kernel fixes, by name, from the case's q width (FlagGems 5.0.2: ``sm_scale = 1 / math.sqrt(d)``
# with ``d`` from ``q.shape``).
SCALE_RULES = {"1/sqrt(d_qk)": lambda d_qk: 1 / math.sqrt(d_qk)}


def fixed_scale(declared, d_qk: int) -> float | None:
    """The softmax scale a kernel computes at whatever it is given, or None: it takes the case's.
    ``declared`` is ``Capabilities.fixed_softmax_scale``: None, a positive number or a rule's name."""
    if declared is None:
        return None
    if isinstance(declared, str):
        if declared not in SCALE_RULES:
            raise ValueError(f"unknown fixed_softmax_scale rule '{declared}' (known: {', '.join(SCALE_RULES)})")
        return SCALE_RULES[declared](d_qk)
    if isinstance(declared, bool) or not isinstance(declared, (int, float)) or not (
            math.isfinite(declared) and declared > 0):
        raise ValueError(f"fixed_softmax_scale must be a positive number or a rule name, got {declared!r}")
    return float(declared)


def fixed_by_kernel(case, declared) -> dict:
    """``{"softmax_scale": [the case's value, the kernel's]}`` where a kernel fixes it otherwise; else {}."""
    kernel = fixed_scale(declared, case.d_qk)
    return {} if kernel is None or kernel == case.softmax_scale else {"softmax_scale": [case.softmax_scale, kernel]}


def as_run(case, fixed: dict):
    """The case as it ran: each parameter in ``fixed`` (``fixed_by_kernel``) at the kernel's value."""
    return dataclasses.replace(case, **{name: kernel for name, (_, kernel) in fixed.items()}) if fixed else case


def identity(definition: dict, declared) -> dict:
    """What a row's case hash is taken over: the case as it ran (``definition``) and, where the kernel fixes a
    parameter, its declaration.  A resumed run keeps a row only where the kernel fixes the same, even on a
    case whose own value equals the old kernel's (no change to record, yet another kernel would run it
    at another value)."""
    return definition if declared is None else {**definition, "fixed_softmax_scale": declared}


def hashed_definition(case, declared) -> dict:
    """``identity`` of ``case`` as a kernel declaring ``declared`` runs it: what ``--resume`` hashes to match
    a row's ``case_hash``."""
    return identity(as_run(case, fixed_by_kernel(case, declared)).to_dict(), declared)


def describe_fixed(fixed) -> list[str]:
    """One line per changed parameter, e.g. ``softmax_scale 0.0722 -> 0.0417 (fixed by the kernel)``."""
    if not isinstance(fixed, dict):
        return []
    return [f"{name} {pair[0]:.3g} -> {pair[1]:.3g} (fixed by the kernel)" for name, pair in fixed.items()
            if isinstance(pair, (list, tuple)) and len(pair) == 2
            and all(isinstance(v, (int, float)) for v in pair)]


