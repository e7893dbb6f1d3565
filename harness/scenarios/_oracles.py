"""The oracle calls a dense answer needs (``_common.Answer``), run together: the float64 oracle on the inputs
as the kernel computes with them, for fp8 also on the unquantised ones, and the float32 emulation of the same
computation whose error is the answer's noise floor (``judging.noise_floor``)."""

from ..judging import oracle
from ..judging.conventions import at_fixed_parameters, kernel_view
from ..judging.noise_floor import FLOOR_DTYPE


def run_oracles(answers: list):
    """Every answer's oracle calls still to run: the float64 ones in one ``oracle.expected_many`` call, the
    emulations in another (one compute dtype a call)."""
    for dtype, slots in ((None, [(a, f, c) for a in answers for f, c in _oracle_calls(a)]),
                         (FLOOR_DTYPE, [(a, "floor", kernel_view(a.inputs, a.backend.capabilities))
                                        for a in answers if a.floor is None])):
        calls = [call for _, _, call in slots]
        results = oracle.expected_many(calls) if dtype is None else oracle.expected_many(calls, dtype)
        for (a, field, _), result in zip(slots, results):
            setattr(a, field, result)


def _oracle_calls(a) -> list[tuple]:
    """The float64 oracle calls an answer still needs, by the field each fills: the inputs as the kernel
    computes with them, and for fp8 also the unquantised ones (at the parameters the kernel fixes too)."""
    calls = []
    if a.expected is None:
        calls.append(("expected", kernel_view(a.inputs, a.backend.capabilities)))
    if a.end_to_end is None and a.inputs.is_fp8 and a.inputs.q_model is not None:
        calls.append(("end_to_end", oracle.model_precision(at_fixed_parameters(a.inputs, a.backend.capabilities))))
    return calls
