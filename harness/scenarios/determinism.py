"""``determinism``: the same call twice must be bitwise equal."""

from ..checks import DETERMINISM
from ._common import bitwise_equal, build_inputs, first_difference, judge, launch


def run(case, backend, device):
    inputs = build_inputs(case, device)
    out1, lse1, kernel_ms = launch(backend, inputs)
    out2, lse2, _ = launch(backend, inputs)
    failures, messages = [], []
    for name, a, b in (("out", out1, out2), ("lse", lse1, lse2)):
        if not bitwise_equal(a, b):
            failures.append(DETERMINISM)
            messages.append(f"{case.id}: {name} differs between two identical calls, {first_difference(a, b)}")
    return judge(case, backend, inputs, out1, lse1, kernel_ms, extra_failures=failures,
                 extra_metrics={DETERMINISM: {"bitwise_equal": not failures}}, extra_messages=messages)
