"""``mla-verify``: the command line.

Every subcommand lives in ``harness/commands/`` with ``add_parser`` and
``main``.  Bad input of any kind becomes one ``mla-verify: error: ...`` line and
exit code 2, never a traceback.

Parsing is light: argparse picks the subcommand, only that command's module is imported to
build its parser, and heavy imports (torch) wait for the command's ``main``.  ``run``'s ``main``
starts its spare workers before it imports torch (``commands/run_start.py``).
"""

import argparse
import importlib
import pkgutil
import sys
import time
import traceback

from . import commands
from .allocator import keep_freed_blocks
from .cores import passive_openmp
from .errors import InputError
from .interrupts import watch_sigint
from .jit_cache import cache_root, point_jits_at
from .recording.status import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED


def _command_names() -> list[str]:
    """Module ``NAME_cmd`` in harness/commands is subcommand NAME (a new subcommand needs no edit here)."""
    return sorted(m.name.removesuffix("_cmd") for m in pkgutil.iter_modules(commands.__path__)
                  if m.name.endswith("_cmd"))


def _commands(only: str | None = None):
    """The command modules, in name order; when ``only`` names one, only that module is imported
    (``report`` then starts without importing torch, whatever the other modules import)."""
    names = _command_names()
    if only in names:
        names = [only]
    return [importlib.import_module(f"{commands.__name__}.{n}_cmd") for n in names]


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # argparse's own errors: one line, exit 2
        raise InputError(f"{self.prog}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="mla-verify", description="Verify paged MLA decode and target-verify kernels.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in _commands(only):
        command.add_parser(sub)
    return parser


def command_named(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names, as argparse reads it (its first positional), without importing any
    command; None when it names none (the full parser then says what is wrong, or prints the help)."""
    first = _Parser(prog="mla-verify", add_help=False)
    first.add_argument("command", nargs="?")
    try:
        command = first.parse_known_args(argv)[0].command
    except InputError:
        return None
    return command if command in _command_names() else None


def parse(argv: list[str]) -> argparse.Namespace:
    return build_parser(command_named(argv)).parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    started = time.perf_counter()     # the summary's wall time counts from here: start-up and workers included
    watch_sigint()       # a user's Ctrl-C stops the run; a kernel's own KeyboardInterrupt is its case's error
    passive_openmp()     # before any command imports torch
    keep_freed_blocks()  # the oracle's large blocks reused, not faulted in again (allocator.py)
    try:
        args = parse(argv)
        args.started = started
        point_jits_at(cache_root(getattr(args, "cache_dir", None)))    # before any worker or kernel import
        return args.func(args)
    except InputError as e:
        print(f"mla-verify: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:      # `mla-verify list | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:     # workers ignore SIGINT (worker_process); the run's are stopped on the way out
        print("mla-verify: interrupted; rows written so far are in the results file", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:        # a bug here must not read as a kernel's failure (exit 1) in a CI gate
        traceback.print_exc()
        print(f"mla-verify: internal error, a bug in mla-verify and not a finding: {type(e).__name__}: {e} "
              f"(rows written so far are kept; please report it with the traceback above)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
