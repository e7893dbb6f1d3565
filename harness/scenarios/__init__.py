"""Scenarios: what is done with a case's inputs.  One module per scenario; the files are the registry.

Module ``NAME.py`` is scenario NAME: it defines ``run(case, backend, device, waits=True) -> Outcome``,
and may define ``start(case, backend, device, waits=True)`` (its kernel, launched; the answer waits
for its chunk to be judged) and ``verdicts(answers, timing)`` (how its answers are judged together;
without one, ``_common.verdicts``).  ``waits`` says whether the case waits for the device around each
kernel (``phases``: a case alone does, a case of a chunk of several in a worker does not); a
scenario whose ``run`` takes no ``waits`` always waits.  ``cases.scenario_names()`` lists the same
files, so a suite is validated against exactly the scenarios that exist.  Shared input building,
launch and judging live in ``_common.py``.  Adding a scenario means adding one file.
"""

import importlib
import inspect

from ..planning.cases import scenario_names
from ..recording.outcome import Outcome
from . import _common
from ._common import Answer, build_inputs, judge, launch  # noqa: F401  (shared steps, for bench and tests)


def _module(scenario: str):
    return importlib.import_module(f"{__name__}.{scenario}")


def run(case, backend, device, waits: bool = True) -> Outcome:
    """The case run whole; ``waits``: whether it waits for the device around its kernels."""
    if case.scenario not in scenario_names():
        return Outcome.unsupported(f"scenario '{case.scenario}' does not exist here")
    run_whole = _module(case.scenario).run
    if "waits" not in inspect.signature(run_whole).parameters:      # it always waits
        return run_whole(case, backend, device)
    return run_whole(case, backend, device, waits=waits)


def start(case, backend, device, waits: bool = True):
    """A scenario with ``start`` (one call, judged with others) gives its answer, to be judged with its
    chunk (``verdicts``); any other scenario runs whole and gives its outcome.  ``waits``: whether the
    case waits for the device around its kernels (``chunk.run_chunk`` decides)."""
    if case.scenario in scenario_names():
        module = _module(case.scenario)
        if hasattr(module, "start"):
            return module.start(case, backend, device, waits=waits)
    return run(case, backend, device, waits)


def verdicts(answers: list, timing: dict | None = None) -> list[Outcome]:
    """Each answer's outcome, in order: the answers of one scenario judged together by its ``verdicts``
    (``_common.verdicts`` unless the scenario module defines its own).  ``timing`` gets each phase's host
    milliseconds, summed over the scenarios."""
    judges = {}                                  # judging function -> indices of its answers
    for i, a in enumerate(answers):
        judges.setdefault(getattr(_module(a.case.scenario), "verdicts", _common.verdicts), []).append(i)
    outcomes = [None] * len(answers)
    for judge_all, at in judges.items():
        spent = {}
        for i, outcome in zip(at, judge_all([answers[i] for i in at], spent)):
            outcomes[i] = outcome
        if timing is not None:
            for name, ms in spent.items():
                timing[name] = timing.get(name, 0.0) + ms
    return outcomes
