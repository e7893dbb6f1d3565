"""The oracle calls a dense answer needs (``_common.Answer``), run together: the float64 oracle on the inputs
as the kernel computes with them, for fp8 also on the unquantised ones; the float32 emulation of the same
computation, whose error is the answer's noise floor (``judging.noise_floor``); and the magnitudes the error
model's second looks read where a check failed (``second_look``)."""

from ..judging import oracle, weight_rounding
from ..judging.compare import Pair
from ..judging.conventions import at_fixed_parameters, kernel_view
from ..judging.noise_floor import FLOOR_DTYPE
from ..judging.tolerances import TOLERANCES


def run_oracles(answers: list):
    """Every answer's float64 oracle calls still to run, in one ``oracle.expected_many`` call."""
    slots = [(a, f, c) for a in answers for f, c in _oracle_calls(a)]
    for (a, field, _), result in zip(slots, oracle.expected_many([call for _, _, call in slots])):
        setattr(a, field, result)


def run_floors(answers: list):
    """The float32 emulations of these answers (``noise_floor``) still to run, in one call."""
    todo = [a for a in answers if a.floor is None]
    calls = [kernel_view(a.inputs, a.backend.capabilities) for a in todo]
    for a, result in zip(todo, oracle.expected_many(calls, FLOOR_DTYPE)):
        a.floor = result


def _oracle_calls(a) -> list[tuple]:
    """The float64 oracle calls an answer still needs, by the field each fills: the inputs as the kernel
    computes with them, and for fp8 also the unquantised ones (at the parameters the kernel fixes too)."""
    calls = []
    if a.expected is None:
        calls.append(("expected", kernel_view(a.inputs, a.backend.capabilities)))
    if a.end_to_end is None and a.inputs.is_fp8 and a.inputs.q_model is not None:
        calls.append(("end_to_end", oracle.model_precision(at_fixed_parameters(a.inputs, a.backend.capabilities))))
    return calls


def second_look(a, checks: dict, pairs: dict):
    """The error model's second looks at an out or LSE over the flat element bound (``weight_rounding``): bf16
    or fp16 weights' rounding in out, float32 scores' rounding in LSE."""
    out_look = weight_rounding.OUT_LOOKS.get(a.case.dtype)
    looks = ((out_look, "out", oracle.value_magnitudes),) if out_look else ()
    looks = [(look, name, magnitudes)
             for look, name, magnitudes in looks + ((weight_rounding.LSE, "lse", oracle.score_magnitudes),)
             if name in checks and not checks[name].passed and isinstance(pairs.get(name), Pair)]
    if not looks:                               # the common case: nothing over its bound, no view to build
        return
    view = kernel_view(a.inputs, a.backend.capabilities)
    for look, name, magnitudes in looks:
        pair = pairs[name]
        weight_rounding.recheck(checks[name], pair.actual, pair.expected, getattr(TOLERANCES[a.case.dtype], name),
                                lambda rows, m=magnitudes: m(view, rows), look)
