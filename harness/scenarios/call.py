"""``call``: one kernel call, compared with the oracle."""

from ._common import build_inputs, expect, launch, verdicts


def start(case, backend, device):
    """Inputs, the kernel, then the oracle: an answer for ``verdicts``."""
    inputs = build_inputs(case, device)
    return expect(case, backend, inputs, launch(backend, inputs))


def run(case, backend, device):
    return verdicts([start(case, backend, device)])[0]
