"""``mla-verify``: the command line.

Every subcommand lives in ``harness/commands/`` with ``add_parser`` and
``main``.  Bad input of any kind becomes one ``mla-verify: error: ...`` line and
exit code 2, never a traceback.
"""

import argparse
import importlib
import pkgutil
import sys

from . import commands, gpu_memory, gpus, isolation
from .errors import EXIT_BAD_INPUT, InputError
from .status import EXIT_INTERRUPTED


def _commands(only: str | None = None):
    """The modules in harness/commands, in name order (a new subcommand needs no edit here).

    Module ``NAME_cmd`` is subcommand NAME.  When ``only`` names one, only that module is
    imported: ``report`` then starts without importing torch.
    """
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if m.name.endswith("_cmd"))
    if only is not None and f"{only}_cmd" in names:
        names = [f"{only}_cmd"]
    return [importlib.import_module(f"{commands.__name__}.{n}") for n in names]


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # argparse's own errors: one line, exit 2
        raise InputError(f"{self.prog}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="mla-verify", description="Verify paged MLA decode and target-verify kernels.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in _commands(only):
        command.add_parser(sub)
    return parser


def _run_options(argv: list[str]) -> dict | None:
    """``run``'s ``--workers``, ``--device`` and ``--gpus`` as given, read before argparse (and torch) are
    loaded; None for any other command, or for help."""
    if not argv or argv[0] != "run" or any(a in ("-h", "--help") for a in argv):
        return None
    options = {}
    for i, a in enumerate(argv):
        for name in ("--workers", "--device", "--gpus"):
            if a.startswith(name + "="):
                options[name] = a.split("=", 1)[1]
            elif a == name and i + 1 < len(argv):
                options[name] = argv[i + 1]
    options.setdefault("--device", "cuda" if isolation.gpu_present() else "cpu")
    return options


def _spares_wanted(options: dict | None, sets: int = 1) -> int:
    """How many workers per GPU ``run`` with crash isolation (the default) will start, from its
    ``_run_options``: they can start before this process imports torch.  0 for any other command, or
    ``--workers 0``."""
    if options is None:
        return 0
    if "--workers" in options:
        try:
            return max(int(options["--workers"]), 0)
        except ValueError:
            return 0            # the parser reports it
    return isolation.default_workers(options["--device"], sets)


def _start_spares(options: dict | None):
    """Start ``run``'s spare workers, one set per GPU it uses, measuring free memory first where NVML can
    say (before any spare can make a CUDA context); returns what was measured, for ``run``."""
    sets = gpus.plan(options.get("--gpus"), options["--device"])[0] if options else [(None, None)]
    spares = _spares_wanted(options, len(sets))
    if not spares:
        return None, None
    at_start = per_gpu = None
    if options["--device"] == "cuda" and sets[0][0] is None:
        at_start = gpu_memory.free_memory()
    elif options["--device"] == "cuda":
        per_gpu = gpu_memory.free_memory_of([record["gpu"] for _, record in sets])
    pins = [pin for pin, _ in sets]
    warm = at_start is not None or per_gpu is not None
    if pins == [None]:        # one set on the default device, as a run on one GPU always was
        isolation.start_spares(spares, warm=warm)
    else:
        isolation.start_spares(spares, warm=warm, pins=pins)
    return at_start, per_gpu


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        memory_at_start, gpu_memory_at_start = _start_spares(_run_options(argv))
        args = build_parser(argv[0] if argv else None).parse_args(argv)
        args.memory_at_start, args.gpu_memory_at_start = memory_at_start, gpu_memory_at_start
        return args.func(args)
    except InputError as e:
        print(f"mla-verify: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:      # `mla-verify list | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:     # workers ignore SIGINT (isolation); the run's are stopped on the way out
        print("mla-verify: interrupted; rows written so far are in the results file", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
