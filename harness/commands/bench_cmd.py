"""``mla-verify bench``: verified kernel speed per (case, backend), against measured ceilings."""

import sys
import time
from pathlib import Path

from ..errors import InputError
from ..recording.results import ResultsWriter
from ..recording.status import EXIT_FAILURES, Verdict, verdict_of
from .run_cmd import device_asked, load_suites

GPU_ITERS, CPU_ITERS = (50, 5), (5, 1)     # (timed iterations, warm-up) by device


def add_parser(sub):
    p = sub.add_parser("bench", help="time verified kernels: kernel and end-to-end time, bytes/s, FLOP/s, roofline")
    p.add_argument("--suite", required=True, help="suite name(s), comma-separated, or a path to a .toml shapes file")
    p.add_argument("--backend", help="backend(s), comma-separated, compared within this run "
                                     "(default: auto on a GPU, torch,reference on the CPU)")
    p.add_argument("--case", help="only these cases: ids (suite/group/index) or groups (suite/group), comma-separated")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--out", help="results file (JSONL); default reports/bench-<time>.jsonl")
    p.add_argument("--csv", metavar="FILE", help="also write the bench rows as CSV")
    p.add_argument("--iters", type=int, help=f"timed iterations (default {GPU_ITERS[0]} on a GPU, {CPU_ITERS[0]} on "
                                             f"the CPU)")
    p.add_argument("--warmup", type=int, help=f"untimed warm-up calls (default {GPU_ITERS[1]} GPU, {CPU_ITERS[1]} CPU)")
    p.add_argument("--cross-check", action="store_true",
                   help="also time each launch independently (FlashMLA's kernelkit when importable, else "
                        "triton.testing.do_bench_cudagraph), the harness's side with that timer's own L2 flush; "
                        "they must agree within 3%%")
    p.add_argument("--l2-flush", choices=["read", "write", "none"], default="read",
                   help="GPU: between timed calls, read (default) or rewrite a 256 MiB buffer, or do not flush L2")
    p.add_argument("--remeasure-ceilings", action="store_true",
                   help="measure copy bandwidth and bf16 matmul rate again instead of reading the cache")
    p.set_defaults(func=main)


def load_backends(spec: str) -> list:
    """Each named backend that loads; one that does not is a printed line, not an abort (unless none load)."""
    from ..running.backend_loader import load_backend
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise InputError("--backend: no backend given")
    loaded, failed = [], []
    for name in dict.fromkeys(names):
        try:
            loaded.append((name, load_backend(name)))
        except (InputError, Exception) as e:   # an unknown or unimportable backend: report it, carry on
            failed.append(f"{name}: {e}")
    if not loaded:
        raise InputError("--backend: no backend could be loaded (" + "; ".join(failed) + ")")
    for f in failed:
        print(f"mla-verify: bench: backend not loaded, skipped: {f}", file=sys.stderr)
    return loaded


def _check_positive(name, value):
    if value is not None and value < 1:
        raise InputError(f"{name}: must be at least 1, got {value}")


def main(args) -> int:
    from ..bench import ceilings as ceilings_mod
    from ..bench import crosscheck, output
    from ..bench.runner import CPU_NOTE, BenchOptions, run_bench
    device = device_asked(args.device)
    _check_positive("--iters", args.iters)
    if args.warmup is not None and args.warmup < 0:
        raise InputError(f"--warmup: must be 0 or more, got {args.warmup}")
    if args.cross_check and (why := crosscheck.available()):
        raise InputError(why)
    from ..planning.cases import select  # torch: not while the parser is built
    cases = select(load_suites(args.suite), args.case)
    backends = load_backends(args.backend or ("auto" if device == "cuda" else "torch,reference"))
    iters, warmup = GPU_ITERS if device == "cuda" else CPU_ITERS
    options = BenchOptions(iters=args.iters or iters, warmup=warmup if args.warmup is None else args.warmup,
                           cross_check=args.cross_check, l2_flush=args.l2_flush)
    path = args.out or f"reports/bench-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    if args.csv:   # opened now: a bad path is found before the run, not after it
        try:
            Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
            Path(args.csv).open("a").close()
        except OSError as e:
            raise InputError(f"cannot write CSV file {args.csv}: {e.strerror or e}") from None
    with ResultsWriter(path) as writer:
        ceilings = ceilings_mod.get(device, remeasure=args.remeasure_ceilings)
        print(f"mla-verify: bench of {len(cases)} case(s) x {len(backends)} backend(s) "
              f"({', '.join(n for n, _ in backends)}) on {device}; rows -> {path}", file=sys.stderr)
        print(output.describe_ceilings(ceilings))
        if device != "cuda":
            print(f"NOTE: {CPU_NOTE}.")
        print(output.header())

        def record(row):
            writer.write(row)
            print(output.line(row))
            sys.stdout.flush()
        rows = run_bench(cases, backends, device, ceilings, options, record)
    if args.csv:
        output.write_csv(rows, args.csv)
    return finish(rows, path, args.csv)


def finish(rows, path, csv_path) -> int:
    from ..bench import output
    checks = [line for r in rows if (line := output.cross_check_line(r))]
    for line in checks:
        print(line)
    wide = [r for r in rows if ((r.get("bench") or {}).get("kernel_us") or {}).get("wide")]
    if wide:
        print(f"note: {len(wide)} row(s) have a wide spread (p90/p10 > 1.10): the device was noisy; rerun before "
              f"reading small differences. Compare backends only within one run.")
    fallback = [r for r in rows if str((r.get("bench") or {}).get("timer", "")).startswith("CUDA events")]
    if fallback:
        print(f"note: kineto failed on {len(fallback)} row(s); their kernel time is CUDA-event time per call "
              f"(see bench.timer in the rows)")
    disagree = [r for r in rows if (r.get("bench") or {}).get("cross_check", {}).get("agrees") is False]
    counts = {s: sum(r["status"] == s for r in rows) for s in dict.fromkeys(r["status"] for r in rows)}
    timed = sum(bool((r.get("bench") or {}).get("timed")) for r in rows)
    print(f"{len(rows)} row(s): " + ", ".join(f"{n} {s}" for s, n in counts.items()) + f"; {timed} timed; rows: {path}"
          + (f"; CSV: {csv_path}" if csv_path else ""))
    if disagree:
        print(f"CROSS-CHECK FAILED on {len(disagree)} row(s)")
    verdict = verdict_of(rows)      # run's table: rows all unsupported verified nothing (exit 5)
    if disagree:
        verdict = Verdict("FAILED", EXIT_FAILURES, verdict.counts)
    print(f"verdict: {verdict.name} (exit {verdict.exit_code})")
    return verdict.exit_code
