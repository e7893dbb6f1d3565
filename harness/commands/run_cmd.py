"""``mla-verify run``: run suites against one or more backends, write results, print a summary."""

import sys
import time
from pathlib import Path

from .. import cases as case_mod
from .. import isolation, junit, resources
from ..backend_loader import load_backend
from ..backends import KERNELS, expand_specs
from ..chunk import CHUNK_CASES, run_chunk
from ..errors import InputError
from ..results import ResultsWriter, read_rows
from ..runner import MAX_TIMEOUTS, RunSummary, default_device, run_cases, timeout_limit
from ..status import Status
from ..summary import print_summary

# Rows --resume keeps.  A crash, timeout, error or harness error may be transient (a killed
# process, a full GPU), so those cases run again and their new row supersedes the old one.
KEPT_ON_RESUME = (Status.PASS.value, Status.FAIL.value, Status.UNSUPPORTED.value)


def add_parser(sub):
    p = sub.add_parser("run", help="run suites against one or more backends")
    p.add_argument("--suite", required=True, help="suite name(s), comma-separated, or a path to a .toml file")
    p.add_argument("--backend", default="auto",
                   help="comma-separated: reference, torch, a kernel (mla-verify list), auto (default: every real "
                        "kernel that runs here, else torch), module:NAME or file.py:NAME")
    p.add_argument("--require-kernel", action="store_true",
                   help="exit 2 before running anything unless a real kernel (not torch/reference) is verified")
    p.add_argument("--case", help="run only this case id (suite/group/index)")
    p.add_argument("--out", help="results file (JSONL); default reports/results-<time>.jsonl")
    p.add_argument("--resume", metavar="FILE", help="append to FILE; cases it records as pass, fail or unsupported "
                   "are kept, the rest run (again); the verdict covers every kept and new row")
    p.add_argument("--junit-xml", metavar="PATH", help="also write a JUnit XML file: one testcase per case and backend")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--workers", type=int, default=None,
                   help=f"worker processes that run the kernel (default: on a GPU one per "
                        f"{isolation.CORES_PER_GPU_WORKER} cores, at most {isolation.GPU_WORKERS}; on the CPU 1); "
                        f"0 runs in this process, without crash isolation")
    p.add_argument("--chunk", type=int, default=CHUNK_CASES, metavar="N",
                   help=f"cases whose oracles run in one pass and are compared in one transfer (default "
                        f"{CHUNK_CASES}); 1 runs each case alone.  The rows are the same either way")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take (default 300)")
    p.add_argument("--max-timeouts", type=timeout_limit, default=MAX_TIMEOUTS, metavar="N",
                   help=f"after N timeouts in a row on a backend, record its remaining cases as timeout without "
                        f"running them (default {MAX_TIMEOUTS}; 0 runs every case)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def load_suites(spec: str):
    names = [s for s in spec.split(",") if s.strip()]
    if not names:
        raise InputError("--suite: no suite given")
    return [case_mod.load_suite(n.strip()) for n in names]


def previous_rows(path: str, backend_name: str, case_ids: set) -> tuple[list[dict], int]:
    """The rows --resume keeps (the latest of each asked-for case on this backend), and how many it found."""
    latest = {}
    for row in read_rows(path):
        if row.get("backend") == backend_name and row.get("case_id") in case_ids:
            latest[row["case_id"]] = row
    return [r for r in latest.values() if r.get("status") in KEPT_ON_RESUME], len(latest)


def check_writable(path: str):
    """Fail before the run, not after it, when a requested output cannot be written."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise InputError(f"--junit-xml {path}: cannot write: {e.strerror or e}") from None


def main(args) -> int:
    suites = load_suites(args.suite)
    cases = case_mod.select(suites, args.case)
    device = args.device or default_device()
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available here")
    if args.workers is None:
        args.workers = isolation.default_workers(device)
    if args.workers < 0:
        raise InputError(f"--workers must be 0 or more, got {args.workers}")
    if args.chunk < 1:
        raise InputError(f"--chunk must be 1 or more, got {args.chunk}")
    if not args.timeout > 0:
        raise InputError(f"--timeout must be positive, got {args.timeout}")
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise InputError("--resume FILE already names the results file; drop --out or make them the same")
    specs, auto_notes = expand_specs(args.backend, device)
    for note in auto_notes:
        print(f"mla-verify: auto: {note}", file=sys.stderr)
    if args.require_kernel and not any(s in KERNELS for s in specs):
        raise InputError("--require-kernel: no real kernel will be verified here ("
                         + "; ".join(auto_notes or [f"backends asked for: {', '.join(specs)}"]) + ")")
    memory, measuring_s = None, 0.0
    if args.workers:
        # the spares (cli) load the first backend and make their CUDA context while this process prepares
        # the run.  Free memory is measured first, so it never depends on how far they got: by the cli
        # before the spares started, where NVML can say (gpu_memory), else here, before they are told
        at_start = getattr(args, "memory_at_start", None) if device == "cuda" else None
        if at_start is not None:
            *memory, measuring_s = at_start
        else:
            t0 = time.perf_counter()
            memory = resources.available_bytes(device)
            measuring_s = time.perf_counter() - t0
        isolation.load_in_spare(isolation.worker_job(specs[0], device, run_chunk), args.workers)
    backends = [(spec, load_backend(spec)) for spec in specs]     # every bad spec fails before any case runs
    if args.junit_xml:
        check_writable(args.junit_xml)
    path = args.resume or args.out or f"reports/results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    resuming = bool(args.resume) and Path(args.resume).exists()
    summary = RunSummary(selection=auto_notes, seconds=measuring_s)    # as when the run measures itself
    case_ids = {c.id for c in cases}
    with ResultsWriter(path, append=bool(args.resume)) as writer:
        for spec, backend in backends:
            kept, recorded = previous_rows(path, backend.name, case_ids) if resuming else ([], 0)
            summary.previous.extend(kept)
            if resuming:
                print(f"mla-verify: resume: {path} records {recorded} of these cases on {backend.name}; "
                      f"{len(kept)} kept ({_tally(kept)}), {recorded - len(kept)} crash/timeout/error row(s) "
                      f"run again", file=sys.stderr)
            print(f"mla-verify: {len(cases) - len(kept)} case(s) from {', '.join(s.name for s in suites)} on "
                  f"backend {backend.name} ({device}); results -> {path}", file=sys.stderr)
            run_cases(cases, backend, spec, device, writer, skip_ids={r["case_id"] for r in kept},
                      progress=not args.no_progress and sys.stderr.isatty(), workers=args.workers,
                      timeout_s=args.timeout, summary=summary, row_extra={"selection": auto_notes},
                      chunk_cases=args.chunk, memory=memory, max_timeouts=args.max_timeouts)
            memory = None        # the next backend's run measures for itself
    print_summary(summary, path)
    if args.junit_xml:
        junit.write(args.junit_xml, summary.all_rows)
    return summary.verdict.exit_code


def _tally(rows) -> str:
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
