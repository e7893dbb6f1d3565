"""``mla-verify run``: run suites against one or more backends, write results, print a summary."""

import sys
import time
from collections import Counter
from pathlib import Path

from .. import cases as case_mod
from .. import gpu_memory, gpus, isolation, junit, placement, resources, shards
from ..backend_loader import load_backend
from ..backends import KERNELS, expand_specs
from ..chunk import CHUNK_CASES, run_chunk
from ..environment import mla_verify_version
from ..errors import InputError
from ..fixed_params import hashed_definition
from ..results import ResultsWriter, case_hash, check_distinct_outputs, check_output_path, why_run_again
from ..runner import MAX_TIMEOUTS, RunSummary, default_device, run_cases, timeout_limit
from ..status import Status
from ..summary import print_summary

# Rows --resume keeps.  A crash, timeout, error or harness error may be transient (a killed
# process, a full GPU), so those cases run again and their new row supersedes the old one.
# A kept row also has to be this kernel's, on this case definition, by this mla-verify (why_run_again).
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
                   "by the same kernel version, case definition and mla-verify version are kept, the rest run "
                   "(again); the verdict covers every kept and new row")
    p.add_argument("--junit-xml", metavar="PATH", help="also write a JUnit XML file: one testcase per case and backend")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--workers", type=int, default=None,
                   help=f"worker processes per GPU that run the kernel (default: the host's cores shared out over "
                        f"the GPUs, one per {isolation.CORES_PER_GPU_WORKER} cores, at most {isolation.GPU_WORKERS} "
                        f"a GPU; on the CPU 1); 0 runs in this process, without crash isolation")
    p.add_argument("--gpus", default=None, metavar="all|0,2,5",
                   help="the GPUs to use, by nvidia-smi index: one set of workers pinned to each (default all; "
                        "not used on the CPU); a case runs on one GPU and its row says which")
    p.add_argument("--shard", metavar="K/N", help="run only shard K of N: a deterministic slice of the cases, "
                   "balanced by their estimated size; every case is in exactly one of the N shards")
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


def previous_rows(rows: list[dict], backend, cases: list) -> tuple[list[dict], int, Counter]:
    """What --resume keeps of ``rows``: the latest row of each asked-for case on this backend, when its
    status is kept and it was made by this kernel, on this case definition, by this mla-verify.  Also
    how many cases have a row, and why those that would be kept but for their identity run again."""
    by_id = {c.id: c for c in cases}
    latest = {}
    for row in rows:
        if row.get("backend") == backend.name and row["case_id"] in by_id:
            latest[row["case_id"]] = row
    info, version = backend.info(), mla_verify_version()
    # a kernel that fixes a parameter ran the case at its own value: its rows hash what ran
    declared = getattr(getattr(backend, "capabilities", None), "fixed_softmax_scale", None)
    kept, changed = [], Counter()
    for case_id, row in latest.items():
        if row["status"] not in KEPT_ON_RESUME:
            continue
        reason = why_run_again(row, info, case_hash(hashed_definition(by_id[case_id], declared)), version)
        if reason is None:
            kept.append(row)
        else:
            changed[reason] += 1
    return kept, len(latest), changed


def is_real_kernel(spec: str) -> bool:
    """Whether ``spec`` names a real kernel for ``--require-kernel``: a kernel, or an engine profile of one
    (``flashmla@sglang-0.5.23`` calls FlashMLA as that engine does)."""
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
    suites = load_suites(args.suite)
    shard = shards.parse(args.shard) if args.shard is not None else None
    cases = case_mod.select(suites, args.case)
    selected = len(cases)
    if shard is not None:
        cases = shards.take(cases, *shard)
    device = args.device or default_device()
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available here")
    sets = worker_sets(args, device)
    if args.chunk < 1:
        raise InputError(f"--chunk must be 1 or more, got {args.chunk}")
    if not args.timeout > 0:
        raise InputError(f"--timeout must be positive, got {args.timeout}")
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise InputError("--resume FILE already names the results file; drop --out or make them the same")
    path = args.resume or args.out or f"reports/results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    check_outputs(args, path)
    specs, auto_notes = expand_specs(args.backend, device)
    for note in auto_notes:
        print(f"mla-verify: auto: {note}", file=sys.stderr)
    if args.require_kernel and not any(is_real_kernel(s) for s in specs):
        raise InputError("--require-kernel: no real kernel will be verified here ("
                         + "; ".join(auto_notes or [f"backends asked for: {', '.join(specs)}"]) + ")")
    memory, measuring_s = None, 0.0
    if args.workers:
        # the spares (cli) load the first backend and make their CUDA context while this process prepares
        # the run.  Free memory is measured first, so it never depends on how far they got: by the cli
        # before the spares started, where NVML can say (gpu_memory), else here, before they are told
        at_start = getattr(args, "memory_at_start", None) if device == "cuda" else None
        per_gpu = _per_gpu_memory(args, sets) if device == "cuda" and sets[0].pin is not None else None
        if per_gpu is not None:
            memory, measuring_s = per_gpu
        elif at_start is not None:
            *memory, measuring_s = at_start
        else:
            t0 = time.perf_counter()
            memory = resources.available_bytes(device)
            measuring_s = time.perf_counter() - t0
        isolation.load_in_spare(isolation.worker_job(specs[0], device, run_chunk), args.workers * len(sets))
    backends = [(spec, load_backend(spec)) for spec in specs]     # every bad spec fails before any case runs
    resuming = bool(args.resume) and Path(args.resume).exists()
    summary = RunSummary(selection=auto_notes, seconds=measuring_s)    # as when the run measures itself
    row_extra = {"selection": auto_notes}
    if shard is not None:
        row_extra.update(shard=shards.label(*shard), shard_of=selected)
        print(f"mla-verify: shard {shards.label(*shard)}: {len(cases)} of the {selected} case(s)", file=sys.stderr)
    # locked (a second writer stops here) and, on resume, validated whole before anything is written
    with ResultsWriter(path, append=bool(args.resume)) as writer:
        for spec, backend in backends:
            if memory is None and device == "cuda" and sets[0].pin is not None:
                isolation.stop_spares()          # the last backend's workers gone, each GPU measured again
                measured = _per_gpu_memory(args, sets)
                memory = measured[0] if measured else None
            kept, recorded, changed = previous_rows(writer.rows_before, backend, cases) if resuming else ([], 0, {})
            summary.previous.extend(kept)
            if resuming:
                transient = recorded - len(kept) - sum(changed.values())
                print(f"mla-verify: resume: {path} records {recorded} of these cases on {backend.name}; "
                      f"{len(kept)} kept ({_tally(kept)}), {transient} crash/timeout/error row(s) run again"
                      + _changed_note(changed), file=sys.stderr)
            print(f"mla-verify: {len(cases) - len(kept)} case(s) from {', '.join(s.name for s in suites)} on "
                  f"backend {backend.name} ({device}); results -> {path}", file=sys.stderr)
            run_cases(cases, backend, spec, device, writer, skip_ids={r["case_id"] for r in kept},
                      progress=not args.no_progress and sys.stderr.isatty(), workers=args.workers,
                      timeout_s=args.timeout, summary=summary, row_extra=row_extra,
                      chunk_cases=args.chunk, memory=memory, max_timeouts=args.max_timeouts, sets=sets)
            memory = None        # the next backend's run measures for itself
            args.gpu_memory_at_start = None
            for s in sets:
                s.lost, s.deaths = None, 0
    # every file is written (the results synced and closed above) before the verdict is printed
    if args.junit_xml:
        junit.write(args.junit_xml, summary.all_rows)
    print_summary(summary, path)
    return summary.verdict.exit_code


def worker_sets(args, device: str) -> list:
    """One ``placement.WorkerSet`` per GPU the run uses (``--gpus``), and ``args.workers`` settled: per GPU."""
    set_plan, note = gpus.plan(args.gpus, device)
    if args.workers is None:
        args.workers = isolation.default_workers(device, len(set_plan))
    if args.workers < 0:
        raise InputError(f"--workers must be 0 or more, got {args.workers}")
    if args.workers == 0 and set_plan[0][0] is not None:     # pinned: only a worker can be
        note, set_plan = "--workers 0: the run stays in this process, on its default GPU; --gpus is not used", \
            [(None, None)]
    if note:
        print(f"mla-verify: {note}", file=sys.stderr)
    return [placement.WorkerSet(pin, record) for pin, record in set_plan]


def _per_gpu_memory(args, sets) -> tuple[tuple[int, str], float] | None:
    """Each GPU's free memory for its set's gate, as NVML said before the spares started (the cli), else
    now, before any spare is told its job; and the least of them, which every case must fit.  None where
    NVML cannot say: the run then measures with torch, on its default GPU, for every set."""
    t0 = time.perf_counter()
    found = getattr(args, "gpu_memory_at_start", None) or gpu_memory.free_memory_of(
        [s.placement["gpu"] for s in sets])
    if found is None:
        return None
    for s in sets:
        s.available = found[s.placement["gpu"]][0]
    least = min(sets, key=lambda s: s.available)
    return found[least.placement["gpu"]], time.perf_counter() - t0


def _changed_note(changed: Counter) -> str:
    """Why rows that would be kept run again: not made by this kernel, case definition or mla-verify."""
    if not changed:
        return ""
    reasons = ", ".join(f"{reason} ({n})" for reason, n in changed.most_common())
    return f", {sum(changed.values())} run again as their identity changed: {reasons}"


def _tally(rows) -> str:
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
