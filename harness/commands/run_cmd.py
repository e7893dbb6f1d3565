"""``mla-verify run``: run suites against one or more backends, write results, print a summary."""

import dataclasses
import functools
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..cores import cpu_workers, usable_cores
from ..errors import InputError
from ..jit_cache import cache_root
from ..recording import junit
from ..recording.results import ResultsWriter, check_distinct_outputs, check_output_path
from ..recording.summary import auto_lines, print_summary
from ..running import gpus, overlap, placement, shards
from ..running.built_variants import Memo
from ..running.circuit_breaker import MAX_TIMEOUTS, timeout_limit
from ..running.worker_pool import CORES_PER_GPU_WORKER, GPU_WORKERS, WorkerPool, default_workers
from .run_resume import kept_on_resume, previous_rows  # noqa: F401  (previous_rows: for tests and callers)
from .run_start import MeasuredAtStart, memory_before_the_spares_load, per_gpu_memory, start_spares

# Light at import (no torch, nothing that imports it): the parser is built, and the spares started
# (``run_start``), before ``main`` makes the heavy imports.  ``--chunk``'s default is ``chunk.CHUNK_CASES``;
# ``chunk`` imports torch, so the option's default is None and ``run`` reads the constant.


def add_parser(sub):
    p = sub.add_parser("run", help="run suites against one or more backends")
    p.add_argument("--suite", required=True, help="suite name(s), comma-separated, or a path to a .toml file")
    p.add_argument("--backend", default="auto",
                   help="comma-separated: reference, torch, a kernel (mla-verify list), auto (default: every real "
                        "kernel that runs here, else torch), module:NAME or file.py:NAME")
    p.add_argument("--require-kernel", action="store_true",
                   help="exit 2 before running anything unless a real kernel (not torch/reference) is verified")
    p.add_argument("--case", help="only these cases: ids (suite/group/index) or groups (suite/group), "
                                  "comma-separated")
    p.add_argument("--out", help="results file (JSONL); default reports/results-<time>.jsonl")
    p.add_argument("--resume", metavar="FILE", help="append to FILE; cases it records as pass, fail or unsupported "
                   "by the same kernel version, case definition and mla-verify version are kept, the rest run "
                   "(again); the verdict covers every kept and new row")
    p.add_argument("--junit-xml", metavar="PATH", help="also write a JUnit XML file: one testcase per case and backend")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--workers", type=int, default=None,
                   help=f"worker processes per GPU that run the kernel (default: the host's cores shared out over "
                        f"the GPUs, one per {CORES_PER_GPU_WORKER} cores, at most {GPU_WORKERS} "
                        f"a GPU; on the CPU 1); 0 runs in this process, without crash isolation")
    p.add_argument("--gpus", default=None, metavar="all|0,2,5",
                   help="the GPUs to use, by nvidia-smi index: one set of workers pinned to each (default all; "
                        "not used on the CPU); a case runs on one GPU and its row says which")
    p.add_argument("--shard", metavar="K/N", help="run only shard K of N: a deterministic slice of the cases, "
                   "balanced by their estimated size; every case is in exactly one of the N shards")
    p.add_argument("--chunk", type=int, default=None, metavar="N",
                   help="cases whose oracles run in one pass and are compared in one transfer (default "
                        "harness.running.chunk.CHUNK_CASES); 1 runs each case alone.  The rows are the same either way")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take (default 300)")
    p.add_argument("--max-timeouts", type=timeout_limit, default=MAX_TIMEOUTS, metavar="N",
                   help=f"after N timeouts in a row on a backend, record its remaining cases as timeout without "
                        f"running them (default {MAX_TIMEOUTS}; 0 runs every case)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--cache-dir", metavar="DIR", help="where the kernels' JITs keep their builds, kept between "
                   "runs (default $MLA_VERIFY_CACHE, else ~/.cache/mla-verify)")
    p.add_argument("--no-warm-up", action="store_true", help="hand the cases out in their order from the start; "
                   "by default, on a GPU, the first case of each variant a JIT kernel compiles runs first, "
                   "each alone, so each variant is built once (docs/running.md)")
    p.add_argument("--table", action="store_true", help="also print a count per status for each backend, suite, "
                   "mode and dtype (the HTML report has this table too)")
    p.set_defaults(func=main)


def load_suites(spec: str):
    from ..planning import cases as case_mod
    names = [s for s in spec.split(",") if s.strip()]
    if not names:
        raise InputError("--suite: no suite given")
    return [case_mod.load_suite(n.strip()) for n in names]


def is_real_kernel(spec: str) -> bool:
    """Whether ``spec`` names a real kernel for ``--require-kernel``: a kernel, or an engine profile of one
    (``flashmla@sglang-0.5.23`` calls FlashMLA as that engine does)."""
    from ..backends import KERNELS
    return spec in KERNELS or spec.partition("@")[0] in KERNELS


def check_outputs(args, results_path: str):
    """Every output a regular file of its own, refused before anything runs."""
    results_flag = "--resume" if args.resume else "--out"
    check_output_path(results_flag, results_path)
    if args.junit_xml:
        check_output_path("--junit-xml", args.junit_xml)
    check_distinct_outputs({results_flag: results_path, "--junit-xml": args.junit_xml})
    if args.junit_xml:
        check_writable(args.junit_xml)


def check_writable(path: str):
    """Fail before the run, not after it, when a requested output cannot be written."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise InputError(f"--junit-xml {path}: cannot write: {e.strerror or e}") from None


def main(args) -> int:
    """The run: spares started first (before torch is imported), then everything else; the run's worker
    processes are stopped and reaped on the way out, whatever happens."""
    with WorkerPool() as pool:
        at_start = start_spares(args, pool)
        return run(args, pool, at_start)


def run(args, pool: WorkerPool, at_start: MeasuredAtStart) -> int:
    from ..running.run_summary import RunSummary
    suites = load_suites(args.suite)
    cases, selected, shard = _cases(args, suites)
    device = device_asked(args.device)
    sets = worker_sets(args, device)
    # one GPU as the device shows it: the next backend takes the last one's workers, and the memory measured
    # before the first is every backend's (a kept worker is idle, its cache handed back; the gate counts
    # each worker's context).  Pinned sets measure each GPU again per backend, with fresh workers.
    pool.carry_over = sets[0].pin is None
    path, resuming = _results_file(args)
    parallel = side_by_side(pool, args, resuming)      # where several backends run: side by side or in turn
    # from here to "backends chosen": the kernels' packages imported here (``auto`` asks each whether it runs)
    marks = {"device found": time.perf_counter()}
    # the spares import the kernels' packages as this process does, where free memory was measured before they
    # started (NVML): a package's import may make a CUDA context, which a measure taken now would count
    if device == "cuda" and args.workers and at_start.before_spares:
        from ..backends import kernel_modules
        pool.preload(kernel_modules(args.backend))
    specs, auto_notes = _backend_specs(args, device, parallel)
    marks["backends chosen"] = time.perf_counter()
    memory, measuring_s = None, 0.0
    if args.workers:
        memory, measuring_s = memory_before_the_spares_load(device, sets, at_start)
        from ..running.chunk import run_chunk
        from ..running.worker_process import worker_job
        pool.load_in_spare(worker_job(specs[0], device, run_chunk, args.workers * len(sets)),
                           args.workers * len(sets))
    from ..running.backend_loader import load_backend
    backends = [(spec, load_backend(spec)) for spec in specs]     # every bad spec fails before any case runs
    marks["memory measured and backends loaded"] = time.perf_counter()
    summary = RunSummary(selection=auto_notes, seconds=measuring_s,    # as when the run measures itself
                         started=getattr(args, "started", None), marks=marks)
    row_extra = {"selection": auto_notes}
    if shard is not None:
        row_extra.update(shard=shards.label(*shard), shard_of=selected)
        print(f"mla-verify: shard {shards.label(*shard)}: {len(cases)} of the {selected} case(s)", file=sys.stderr)
    the_run = _Run(args, suites, cases, device, sets, summary, row_extra, path, resuming, pool, at_start,
                   len(backends), len(backends) > 1 and parallel)
    # locked (a second writer stops here) and, on resume, validated whole before anything is written
    if len(backends) > 1 and not the_run.resuming:     # a line for the run; resuming, each backend's counts
        order = "each starting as the one before hands out its last case" if the_run.side_by_side \
            else "one backend after another"
        print(f"mla-verify: {len(cases)} case(s) from {', '.join(s.name for s in suites)} on each of "
              f"{len(backends)} backends ({device}), {order}; results -> {path}", file=sys.stderr)
    with ResultsWriter(path, append=bool(args.resume)) as writer:
        _run_backends(the_run, writer, backends, memory)
    # every file is written (the results synced and closed above) before the verdict is printed
    if args.junit_xml:
        junit.write(args.junit_xml, summary.all_rows)
    print_summary(summary, path, table=args.table)
    return summary.verdict.exit_code


def _cases(args, suites):
    """The cases asked for, how many were selected before ``--shard``, and the shard (or None)."""
    from ..planning import cases as case_mod
    shard = shards.parse(args.shard) if args.shard is not None else None
    cases = case_mod.select(suites, args.case)
    selected = len(cases)
    if shard is not None:
        cases = shards.take(cases, *shard)
    return cases, selected, shard


def _results_file(args) -> tuple[str, bool]:
    """The results file's path and whether the run resumes it, once the options and the outputs are checked."""
    if args.chunk is None:
        from ..running.chunk import CHUNK_CASES
        args.chunk = CHUNK_CASES
    if args.chunk < 1:
        raise InputError(f"--chunk must be 1 or more, got {args.chunk}")
    if not args.timeout > 0:
        raise InputError(f"--timeout must be positive, got {args.timeout}")
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise InputError("--resume FILE already names the results file; drop --out or make them the same")
    path = args.resume or args.out or f"reports/results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    check_outputs(args, path)
    return path, bool(args.resume) and Path(args.resume).exists()


def device_asked(asked: str | None) -> str:
    """``--device`` as asked, else cuda when torch sees one; cuda asked for where there is none is bad
    input (``run``, ``selfcheck`` and ``bench`` alike)."""
    import torch

    from ..running.runner import default_device
    device = asked or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available here")
    return device


def _backend_specs(args, device: str, in_parallel: bool) -> tuple[list[str], list[str]]:
    """``--backend`` expanded (``auto`` said on stderr), ``--require-kernel`` held to; ``launch_order`` if parallel."""
    from ..backends import expand_specs, launch_order
    specs, auto_notes = expand_specs(args.backend, device)
    specs = launch_order(specs) if in_parallel else specs
    for line in auto_lines(auto_notes):
        print(f"mla-verify: auto: {line}", file=sys.stderr)
    if args.require_kernel and not any(is_real_kernel(s) for s in specs):
        raise InputError("--require-kernel: no real kernel will be verified here ("
                         + "; ".join(auto_notes or [f"backends asked for: {', '.join(specs)}"]) + ")")
    return specs, auto_notes


@dataclass
class _Run:
    """What every backend of one ``run`` shares."""
    args: object
    suites: list
    cases: list
    device: str
    sets: list
    summary: object
    row_extra: dict
    path: str
    resuming: bool
    pool: WorkerPool
    at_start: MeasuredAtStart
    backends: int             # how many run
    side_by_side: bool        # several, run side by side (``side_by_side``)


def side_by_side(pool: WorkerPool, args, resuming: bool) -> bool:
    """Whether backends run side by side: on one GPU (workers carried over) each starts as the one before hands out
    its last case (``overlap``); pinned sets measure each GPU again, resuming reads the file per backend."""
    return bool(pool.carry_over and args.workers and not resuming)


def _run_backends(r: _Run, writer, backends: list, memory):
    """Every backend's cases: side by side at the seams (``side_by_side``), within ``--workers``, or one by one."""
    if r.side_by_side:
        r.pool.limit = r.args.workers * len(r.sets)
        overlap.one_after_another([functools.partial(_run_backend, r, writer, spec, backend, memory)
                                   for spec, backend in backends])
        return
    for spec, backend in backends:
        _run_backend(r, writer, spec, backend, memory)
        if not r.pool.carry_over:
            memory = None        # the next backend's run measures for itself
        r.at_start.per_gpu = None


def _run_backend(r: _Run, writer, spec: str, backend, memory, drained=None, halt=None):
    """One backend's cases, written to ``writer``; on resume, its rows kept from the file are not run again.
    ``drained``, ``halt``: beside the backends before and after it (``overlap``)."""
    from ..running.runner import run_cases
    if memory is None and r.device == "cuda" and r.sets[0].pin is not None:
        r.pool.stop_spares()          # the last backend's workers gone, each GPU measured again
        measured = per_gpu_memory(r.sets, r.at_start)
        memory = measured[0] if measured else None
    kept = kept_on_resume(writer, backend, r.cases, r.path) if r.resuming else []
    r.summary.previous.extend(kept)
    if r.resuming or r.backends == 1:
        print(f"mla-verify: {len(r.cases) - len(kept)} case(s) from {', '.join(s.name for s in r.suites)} on "
              f"backend {backend.name} ({r.device}); results -> {r.path}", file=sys.stderr)
    args = r.args
    warm = r.device == "cuda" and not args.no_warm_up
    run_cases(r.cases, backend, spec, r.device, writer, skip_ids={row["case_id"] for row in kept},
              progress=not args.no_progress and sys.stderr.isatty(), workers=args.workers,
              timeout_s=args.timeout, summary=r.summary, row_extra=r.row_extra, chunk_cases=args.chunk,
              memory=memory, max_timeouts=args.max_timeouts, sets=[dataclasses.replace(s) for s in r.sets],
              pool=r.pool, warm=warm, drained=drained, halt=halt, built=Memo(cache_root()) if warm else None)


def worker_sets(args, device: str) -> list:
    """One ``placement.WorkerSet`` per GPU the run uses (``--gpus``), and ``args.workers`` settled: per GPU."""
    set_plan, note = gpus.plan(args.gpus, device)
    if args.workers is None:
        args.workers = default_workers(device, len(set_plan))
    if args.workers < 0:
        raise InputError(f"--workers must be 0 or more, got {args.workers}")
    if device == "cpu":
        args.workers, cut = cpu_workers(args.workers, usable_cores())
        if cut:
            print(f"mla-verify: {cut}", file=sys.stderr)
    elif args.workers * len(set_plan) > usable_cores():
        print(f"mla-verify: --workers {args.workers} on {len(set_plan)} GPU(s): more worker processes than the "
              f"{usable_cores()} core(s) here; they share the cores", file=sys.stderr)
    if args.workers == 0 and set_plan[0][0] is not None:     # pinned: only a worker can be
        note, set_plan = "--workers 0: the run stays in this process, on its default GPU; --gpus is not used", \
            [(None, None)]
    if note:
        print(f"mla-verify: {note}", file=sys.stderr)
    return [placement.WorkerSet(pin, record) for pin, record in set_plan]
