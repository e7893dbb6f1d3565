"""``call``: one kernel call, compared with the oracle."""

from ._common import build_inputs, judge, launch


def run(case, backend, device):
    inputs = build_inputs(case, device)
    out, lse, kernel_ms = launch(backend, inputs)
    return judge(case, backend, inputs, out, lse, kernel_ms)
