"""``call``: one kernel call, compared with the oracle."""

from ._common import build_inputs, expect, launch, verdicts


def start(case, backend, device, waits: bool = True):
    """Inputs, the kernel (``waits``: around it, ``_common.launch``), then the oracle: an answer for
    ``verdicts``."""
    inputs = build_inputs(case, device)
    return expect(case, backend, inputs, launch(backend, inputs, waits))


def run(case, backend, device, waits: bool = True):
    return verdicts([start(case, backend, device, waits)])[0]
