"""``mla-verify fuzz``: draw cases beyond the suites, shrink each new failure to a minimal case, keep a
corpus of them (docs/fuzz.md).  The campaign is ``harness/fuzz/``; here its options, and what it prints.

Light at import, as every command is (cli.py): the campaign, which imports torch, waits for ``main``.
"""

import argparse
import re
import shlex
import sys
import time

from ..errors import InputError
from ..recording.results import check_output_path
from .run_cmd import device_asked, worker_sets

DEFAULT_CORPUS = "reports/fuzz-corpus"
DEFAULT_TIME = "10m"
UNITS = {"s": 1, "m": 60, "h": 3600}


def duration(text: str) -> float:
    """``--time``: ``90s``, ``10m``, ``1.5h`` or plain seconds; positive."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not found or float(found.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive duration (like 90s, 10m or 1h)")
    return float(found.group(1)) * UNITS[found.group(2) or "s"]


def at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def add_parser(sub):
    p = sub.add_parser("fuzz", help="draw cases beyond the suites, shrink each failure, keep a corpus")
    p.add_argument("--backend", required=True,
                   help="one backend, as run takes it: torch, a kernel, NAME@PROFILE, mutant:NAME, module:NAME")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--time", type=duration, default=None, metavar="DURATION",
                        help=f"draw rounds until this much time has passed: 90s, 10m, 1h (default {DEFAULT_TIME})")
    budget.add_argument("--cases", type=at_least_one, default=None, metavar="N", help="draw N cases")
    p.add_argument("--seed", type=int, default=None,
                   help="the seed of the drawn cases: the same seed draws the same cases (default: from the clock)")
    p.add_argument("--corpus", default=DEFAULT_CORPUS, metavar="DIR",
                   help=f"where shrunk failures are kept, one suite file each, and replayed first (default "
                        f"{DEFAULT_CORPUS})")
    p.add_argument("--out", help="results file (JSONL); default reports/fuzz-<time>.jsonl")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes per GPU, as for run (on the CPU 1); 0 runs everything, shrinking "
                        "included, in this process, without crash isolation")
    p.add_argument("--max-batch", type=at_least_one, default=8, metavar="N", help="requests per case (default 8)")
    p.add_argument("--max-context", type=at_least_one, default=2048, metavar="N",
                   help="the longest request's keys (default 2048)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take (default 300)")
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run on a Ray cluster: auto (the one running here) or ray.init's address (host:6379, "
                        "ray://host:10001); one actor per GPU, on the CPU one per --workers (docs/fuzz.md)")
    p.set_defaults(func=main, gpus=None)


def one_backend(spec: str) -> str:
    spec = spec.strip()
    if not spec or "," in spec or spec == "auto":
        raise InputError(f"--backend {spec or repr(spec)}: fuzz takes one backend by name (mla-verify list)")
    return spec


def main(args) -> int:
    if args.ray is not None:
        return run_on_ray(args)
    from ..running.worker_pool import WorkerPool
    from .run_start import start_spares
    with WorkerPool() as pool:      # the campaign's workers stopped and reaped on the way out
        at_start = start_spares(args, pool)     # as run's: before torch, so their imports overlap this process's
        return run(args, pool, at_start)


def _settings(args, spec: str, device: str, sets):
    from ..fuzz.campaign import Settings
    from ..fuzz.space import Bounds
    from ..planning.case_checks import LIMITS
    from ..running.chunk import CHUNK_CASES
    for flag, value, limit in (("--max-batch", args.max_batch, LIMITS["batch_size"]),
                               ("--max-context", args.max_context, LIMITS["seqlen"])):
        if value > limit:
            raise InputError(f"{flag} {value} is beyond the largest supported value {limit}")
    if not args.timeout > 0:
        raise InputError(f"--timeout must be positive, got {args.timeout}")
    if args.seed is not None and args.seed < 0:
        raise InputError(f"--seed must be 0 or more, got {args.seed}")
    seconds = args.time if args.time is not None else (None if args.cases else duration(DEFAULT_TIME))
    seed = args.seed if args.seed is not None else time.time_ns() % (1 << 31)
    return Settings(spec, device, seed, args.cases, seconds, Bounds(args.max_batch, args.max_context), args.corpus,
                    args.workers, sets, args.timeout, CHUNK_CASES)


def run(args, pool, at_start) -> int:
    from ..fuzz import corpus
    from ..fuzz.campaign import Campaign
    from ..running.backend_loader import load_backend
    from .list_cmd import why_not_run
    from .run_start import memory_before_the_spares_load
    spec = one_backend(args.backend)
    device = device_asked(args.device)
    sets = worker_sets(args, device)
    settings = _settings(args, spec, device, sets)
    # as run's: one GPU as the device shows it keeps its workers from call to call (rounds, each shrink's
    # reruns), kernel packages imported and kernels built; pinned sets start fresh ones
    pool.carry_over = sets[0].pin is None
    path = _results_path(args)
    backend = load_backend(spec)                       # a bad spec fails before anything runs
    replay = corpus.replay_cases(args.corpus)          # so does a bad file in the corpus
    memory, _ = memory_before_the_spares_load(device, sets, at_start)     # once, as run measures
    _say_start(args, settings, backend, replay, path)
    campaign = Campaign(settings, backend, pool, memory, progress=_progress(args),
                        refused=lambda case: why_not_run(case, backend, device, memory))
    return _run_and_report(campaign, replay, path)


def run_on_ray(args) -> int:
    """The campaign on a Ray cluster: checked here as on one machine, then run by its actors."""
    import dataclasses

    from ..fuzz import corpus, ray_cluster
    from ..fuzz.ray_campaign import RayCampaign
    from ..running.backend_loader import load_backend
    from .list_cmd import why_not_run
    ray_cluster.import_ray()                           # without the extra: one line naming it
    spec = one_backend(args.backend)
    settings = _settings(args, spec, args.device, [])
    path = _results_path(args)
    backend = load_backend(spec)
    replay = corpus.replay_cases(args.corpus)
    with ray_cluster.connected(args.ray):
        settings = dataclasses.replace(settings, device=ray_cluster.cluster_device(args.device))
        count = ray_cluster.actor_count(settings.device, args.workers)
        with ray_cluster.Actors.started(settings, why_not_run, count) as (actors, said):
            nodes = len({s["placement"]["node"] for s in said})
            print(f"mla-verify: fuzz on Ray ({args.ray}): {len(said)} actor(s) on {nodes} node(s)", file=sys.stderr)
            _say_start(args, settings, backend, replay, path)
            return _run_and_report(RayCampaign(settings, backend, actors, progress=_progress(args)), replay, path)


def _results_path(args) -> str:
    path = args.out or f"reports/fuzz-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    check_output_path("--out", path)
    return path


def _progress(args):
    from ..fuzz.progress import Progress
    return Progress(shown=not args.no_progress)


def _say_start(args, settings, backend, replay: list, path: str):
    budget = f"{settings.cases} case(s)" if settings.cases else f"{settings.seconds:g} s"
    print(f"mla-verify: fuzz {backend.name} ({settings.device}), seed {settings.seed}, {budget}; corpus "
          f"{args.corpus}: {len(replay)} case(s) replayed first; results -> {path}", file=sys.stderr)


def _run_and_report(campaign, replay: list, path: str) -> int:
    from ..recording.results import ResultsWriter
    with ResultsWriter(path) as writer:
        summary = campaign.run(writer, replay)
    print_findings(campaign)
    print_verdict(campaign, summary, path)
    return summary.verdict.exit_code


def rerun_command(path, spec: str, device: str) -> str:
    return f"mla-verify run --suite {shlex.quote(str(path))} --backend {shlex.quote(spec)} --device {device}"


def print_findings(campaign, out=None):
    """One block per signature: the first case, what shrinking made of it, its file and rerun line."""
    from ..fuzz.progress import case_text
    from ..fuzz.shrink import sizes_line
    from ..fuzz.signature import describe
    out = out or sys.stdout
    device = campaign.s.device
    for found in campaign.found.values():
        spec = found.spec
        where = "replayed from the corpus" if found.corpus else "the smallest"
        print(f"FOUND {describe(found.sig)} on {spec}: {found.cases} case(s); {where} {case_text(found.case)}",
              file=out)
        if found.corpus:
            print(f"  rerun: {rerun_command(found.case.suite_file, spec, device)}", file=out)
            continue
        if found.note:
            print(f"  {found.note}", file=out)
        if found.kept is None:
            continue
        shrunk = found.shrunk
        stopped = "; stopped at the end of --time, smaller may fail too" if shrunk.stopped else ""
        print(f"  shrunk in {len(shrunk.steps)} step(s) ({', '.join(shrunk.steps) or 'none smaller'}{stopped}), "
              f"{shrunk.reruns} rerun(s): {sizes_line(found.case, shrunk.case)}", file=out)
        again = "fails the same way when run alone" if found.confirmed else "did NOT fail the same way run alone"
        print(f"  kept: {found.kept} ({'already in the corpus' if found.existed else 'new'}; {again})", file=out)
        print(f"  rerun: {rerun_command(found.kept, spec, device)}", file=out)


def print_verdict(campaign, summary, path, out=None):
    from collections import Counter
    out = out or sys.stdout
    counts = Counter(r["status"] for r in summary.rows)
    drawn = f"{campaign.drawn} drawn (seed {campaign.s.seed})"
    replayed = f", {campaign.replayed} replayed from the corpus" if campaign.replayed else ""
    print(f"fuzz: {len(summary.rows)} case(s): {drawn}{replayed}; "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=out)
    print(f"{len(campaign.found)} signature(s) found in {summary.seconds:.1f} s running cases "
          f"({summary.cases_per_second:.1f} cases/s); results: {path}", file=out)
    verdict = summary.verdict
    print(f"verdict: {verdict.name} (exit {verdict.exit_code})", file=out)
