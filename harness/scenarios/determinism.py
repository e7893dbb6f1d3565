"""``determinism``: the same call twice must be bitwise equal."""

from ..judging.checks import DETERMINISM
from ._common import build_inputs, judge, launch
from ._evidence import bitwise_equal, first_difference


def run(case, backend, device, waits: bool = True):
    inputs = build_inputs(case, device)
    first, second = launch(backend, inputs, waits), launch(backend, inputs, waits)
    failures, messages = [], []
    for name, a, b in (("out", first.out, second.out), ("lse", first.lse, second.lse)):
        if not bitwise_equal(a, b):
            failures.append(DETERMINISM)
            messages.append(f"{case.id}: {name} differs between two identical calls, {first_difference(a, b)}")
    return judge(case, backend, inputs, first, others=(second,), extra_failures=failures,
                 extra_metrics={DETERMINISM: {"bitwise_equal": not failures}}, extra_messages=messages)
