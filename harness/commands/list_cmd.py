"""``mla-verify list``: suites, their cases, and the backends with what each supports.

Light at import, as every command is (cli.py): the suites and backends, which import torch, wait for ``main``.
"""

import json

from ..errors import InputError


def add_parser(sub):
    p = sub.add_parser("list", help="list suites, cases and backends")
    p.add_argument("--suite", help="list this suite's cases")
    p.add_argument("--backend", help="describe this backend only")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..planning import cases as case_mod
    if args.suite:
        suite = case_mod.load_suite(args.suite)
        print(f"{suite.name}: {len(suite.cases)} cases  {suite.description}")
        for c in suite.cases:
            print(f"  {c.id:<36} {c.mode:<6} {c.dtype:<8} b={c.batch_size:<3} h={c.heads:<3} "
                  f"h_kv={c.kv_heads} s_q={c.s_q} seqlen={c.seqlen} pad={c.padding} {c.scenario}")
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


def _print_backends(only: str | None):
    from ..backends import BUILTIN
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
        sparse = getattr(backend, "sparse_capabilities", None)
        if sparse is not None:       # a sparse entry point (run_sparse): docs/sparse.md
            print(f"  {'':<18} sparse {json.dumps(sparse.describe())}")
        note = getattr(backend, "availability", None)
        if callable(note):
            print(f"  {'':<18} {note()}")
