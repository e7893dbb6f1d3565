"""Scenarios: what is done with a case's inputs.  One module per scenario; the files are the registry.

Module ``NAME.py`` is scenario NAME: it defines ``run(case, backend, device) -> Outcome``, and may
define ``start(case, backend, device) -> Answer`` (its kernel and oracle, compared later with others).
``cases.scenario_names()`` lists the same files, so a suite is validated against
exactly the scenarios that exist.  Shared input building, launch and judging live
in ``_common.py``.  Adding a scenario means adding one file.
"""

import importlib

from ..cases import scenario_names
from ..outcome import Outcome
from ._common import Answer, build_inputs, judge, launch, verdicts  # noqa: F401  (shared steps, for bench and tests)


def run(case, backend, device) -> Outcome:
    if case.scenario not in scenario_names():
        return Outcome.unsupported(f"scenario '{case.scenario}' does not exist here")
    return importlib.import_module(f"{__name__}.{case.scenario}").run(case, backend, device)


def start(case, backend, device) -> Outcome | Answer:
    """A scenario with ``start`` (one call, judged like any other) gives its ``Answer``, to be compared
    with others (``verdicts``); any other scenario runs whole and gives its outcome."""
    if case.scenario in scenario_names():
        module = importlib.import_module(f"{__name__}.{case.scenario}")
        if hasattr(module, "start"):
            return module.start(case, backend, device)
    return run(case, backend, device)
