"""``mla-verify run``: run suites against a backend, write results, print a summary."""

import sys
import time
from pathlib import Path

from .. import cases as case_mod
from ..backends import load_backend
from ..errors import EXIT_FAILURES, EXIT_OK, InputError
from ..results import ResultsWriter, read_rows
from ..runner import default_device, run_cases
from ..summary import print_summary


def add_parser(sub):
    p = sub.add_parser("run", help="run suites against a backend")
    p.add_argument("--suite", required=True, help="suite name(s), comma-separated, or a path to a .toml file")
    p.add_argument("--backend", default="auto",
                   help="reference, torch, flashmla, auto (default), module:NAME or file.py:NAME")
    p.add_argument("--case", help="run only this case id (suite/group/index)")
    p.add_argument("--out", help="results file (JSONL); default reports/results-<time>.jsonl")
    p.add_argument("--resume", metavar="FILE", help="append to FILE, skipping cases it already records")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes that run the kernel (default 1); 0 runs in this process, "
                        "without crash isolation")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take (default 300)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def load_suites(spec: str):
    names = [s for s in spec.split(",") if s.strip()]
    if not names:
        raise InputError("--suite: no suite given")
    return [case_mod.load_suite(n.strip()) for n in names]


def main(args) -> int:
    suites = load_suites(args.suite)
    cases = case_mod.select(suites, args.case)
    device = args.device or default_device()
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available here")
    if args.workers < 0:
        raise InputError(f"--workers must be 0 or more, got {args.workers}")
    if not args.timeout > 0:
        raise InputError(f"--timeout must be positive, got {args.timeout}")
    backend = load_backend(args.backend)
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise InputError("--resume FILE already names the results file; drop --out or make them the same")
    path = args.resume or args.out or f"reports/results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    done = set()
    if args.resume and Path(args.resume).exists():
        done = {r["case_id"] for r in read_rows(args.resume) if r.get("backend_spec") == args.backend}
    with ResultsWriter(path, append=bool(args.resume)) as writer:
        print(f"mla-verify: {len(cases) - len(done & {c.id for c in cases})} case(s) from "
              f"{', '.join(s.name for s in suites)} on backend {backend.name} ({device}); results -> {path}",
              file=sys.stderr)
        summary = run_cases(cases, backend, args.backend, device, writer, skip_ids=done,
                            progress=not args.no_progress and sys.stderr.isatty(),
                            workers=args.workers, timeout_s=args.timeout)
    print_summary(summary, path)
    return EXIT_OK if summary.ok else EXIT_FAILURES
