"""``mla-verify list --json``: the machine form scripts read, kept as it was before ``list`` became tables.

The suites as text lines, then per backend its ``info()``, ``capabilities.describe()`` and, for a sparse
entry point, its sparse section's ``capabilities.sparse.describe()``, each as one JSON object, and its
availability note.
"""

import json

from ..errors import InputError


def main(args) -> int:
    from ..planning import cases as case_mod
    if args.suite:
        suite = case_mod.load_suite(args.suite)
        print(f"{suite.name}: {len(suite.cases)} cases  {suite.description}")
        for c in suite.cases:
            print(f"  {case_line(c)}")
        return 0
    if not args.backend:
        print("suites:")
        for name in case_mod.suite_names():
            try:
                s = case_mod.load_suite(name)
                print(f"  {name:<20} {len(s.cases):>5} cases  {s.description}")
            except InputError as e:
                print(f"  {name:<20}  invalid: {e}")
    _print_backends(args.backend)
    return 0


def case_line(c) -> str:
    """One case as ``list --suite`` shows it (without the two leading spaces)."""
    return f"{case_shape(c)} {case_inputs(c)}"


def case_shape(c) -> str:
    return f"{c.id:<36} {c.mode:<6} {c.dtype:<8} b={c.batch_size:<3} h={c.heads:<3} h_kv={c.kv_heads} s_q={c.s_q}"


def case_inputs(c) -> str:
    return f"seqlen={c.seqlen} pad={c.padding} {c.scenario}"


def _print_backends(only: str | None):
    from ..backends import BUILTIN, Feature
    from ..running.backend_loader import load_backend
    print("backends:")
    for name in [only] if only else [*BUILTIN, "auto"]:
        try:
            backend = load_backend(name)
        except (InputError, ImportError) as e:
            print(f"  {name:<18} cannot load: {e}")
            continue
        label = f"{name} -> {backend.name}" if name == "auto" else name
        print(f"  {label:<18} {json.dumps(backend.info())}")
        print(f"  {'':<18} supports {json.dumps(backend.capabilities.describe())}")
        if backend.supports(Feature.SPARSE):       # a sparse entry point (run_sparse): docs/sparse.md
            print(f"  {'':<18} sparse {json.dumps(backend.capabilities.sparse.describe())}")
        note = backend.availability()
        if note is not None:
            print(f"  {'':<18} {note}")
