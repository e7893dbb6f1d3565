"""``mla-verify list``: suites, their cases, and the backends with what each supports, for people.

Each backend is a table (``backend_table``): its package and version or the command that installs it,
whether it can run here, what it runs and its limits in words.  ``--suite X --backend Y`` marks the cases
a run here would record as not run on Y, with the runner's reason.  ``--json`` is the machine form
(``list_json``).  Light at import, as every command is (cli.py): the suites and backends, which import
torch, wait for ``main``.
"""

import importlib

from ..errors import InputError
from .backend_table import backend_block, device_here, unloadable_block, wrapped
from .list_json import case_inputs, case_shape


def add_parser(sub):
    p = sub.add_parser("list", help="list suites, cases and backends")
    p.add_argument("--suite", help="list this suite's cases")
    p.add_argument("--backend", help="describe this backend only; with --suite, mark the cases it cannot run here")
    p.add_argument("--json", action="store_true",
                   help="the machine form: each backend's info and capabilities as JSON objects")
    p.set_defaults(func=main)


def main(args) -> int:
    from . import list_json
    if args.json or (args.suite and not args.backend):     # a suite's cases alone: one form for both
        return list_json.main(args)
    from ..planning import cases as case_mod
    if args.suite:
        return _print_marked_cases(case_mod.load_suite(args.suite), args.backend)
    if not args.backend:
        _print_suites(case_mod)
    _print_backends(args.backend)
    return 0


def _print_suites(case_mod):
    print("suites:")
    for name in case_mod.suite_names():
        try:
            s = case_mod.load_suite(name)
            lines = wrapped(f"  {name:<20} {len(s.cases):>5} cases  ", s.description, " " * 36)
        except InputError as e:
            lines = wrapped(f"  {name:<20}  invalid: ", str(e), " " * 24)
        print("\n".join(lines))


def _print_backends(only: str | None):
    from ..backends import BUILTIN
    here = device_here()
    blocks = [_block(spec, here, BUILTIN) for spec in ([only] if only else [*BUILTIN, "auto"])]  # bad spec: exit 2
    print(f"backends (this machine: {here[1]}):")
    for lines in blocks:
        print()
        print("\n".join(lines))


def _block(spec: str, here, builtin) -> list[str]:
    from ..running.backend_loader import load_backend
    try:
        backend = load_backend(spec)
    except ImportError as e:      # a built-in backend's module itself failed to import
        return unloadable_block(spec, e)
    title = f"{spec} -> {backend.name}" if spec == "auto" else spec
    builtin_name = backend.name if spec == "auto" else spec.partition("@")[0]
    return backend_block(title, backend, builtin_name in builtin, here)


def _print_marked_cases(suite, spec: str) -> int:
    """The suite's cases, those a run here records as not run on ``spec`` marked ``x``, each with why."""
    from ..running import resources
    from ..running.backend_loader import load_backend
    from ..running.runner import default_device
    backend = load_backend(spec)
    device = default_device()
    memory = resources.available_bytes(device)      # measured once, as a run does
    reasons = [why_not_run(c, backend, device, memory) for c in suite.cases]
    print("\n".join(wrapped(f"{suite.name}: {len(suite.cases)} cases  ", suite.description, "  ")))
    refused = sum(r is not None for r in reasons)
    print("\n".join(wrapped("", f"{backend.name} here ({device}): {refused} of {len(reasons)} cases not run "
                                 "(marked x, with the reason a run records)", "  ")))
    for case, reason in zip(suite.cases, reasons):    # the shape; below it why not, then its inputs
        lines = wrapped("x " if reason else "  ", case_shape(case), " " * 6)
        lines += wrapped(" " * 6, reason, " " * 8) if reason else []
        print("\n".join(lines + wrapped(" " * 6, case_inputs(case), " " * 8)))
    return 0


def why_not_run(case, backend, device: str, memory: tuple) -> str | None:
    """Why a run here records ``case`` unrun on ``backend``: the runner's precheck (the backend's limits,
    the machine's memory), then the case's scenario's own refusal where it has one; None: it runs."""
    from .. import scenarios
    from ..recording.status import Status
    from ..running.runner import precheck
    refused = precheck(case, backend, device, *memory)
    if refused is not None:
        kind = "unsupported" if refused.status is Status.UNSUPPORTED else refused.status.value
        return f"{kind}: {refused.reason}"
    refusal = getattr(importlib.import_module(f"{scenarios.__name__}.{case.scenario}"), "refusal", None)
    reason = refusal(case, backend, device) if refusal else None
    return None if reason is None else f"unsupported: {reason}"
