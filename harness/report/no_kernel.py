"""Why no kernel was verified, in words for the first screen.

When only the pure-PyTorch ``torch`` backend, the ``reference`` oracle or mutants were compared, the
report checked the harness, not a kernel.  A reader must see that, and why, without hovering over a
badge or opening "how auto chose": which harness backends ran, which kernels ran and compared
nothing, what ``auto`` recorded about each kernel it did not pick, and where the rows ran.  Only
what the rows record is said.
"""

from .scoreboard import harness_only

NO_KERNEL_NOTE = "no real kernel runs here"     # auto's closing note (``backends.resolve_auto``)
SHOWN_NAMES = 4                                 # kernels named per reason; the rest are counted


def _harness_ran(backends: list[str]) -> str:
    names = []
    if "torch" in backends:
        names.append("the pure-PyTorch torch backend")
    if "reference" in backends:
        names.append("the reference oracle")
    mutants = sum(b.startswith("mutant:") for b in backends)
    if mutants:
        names.append(f"{mutants} mutant{'s' if mutants != 1 else ''} (torch with a planted bug)")
    verb = "checks" if len(names) == 1 and not mutants else "check"
    return f"only {' and '.join(names)} ran, which {verb} the harness, not a kernel"


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


def _auto_said(selection) -> list[str]:
    """auto's notes on the kernels it did not pick, one per reason: 'flashmla, flashinfer-fa3 and 7 more:
    needs a CUDA device (none in use here)'."""
    by_reason: dict[str, list[str]] = {}
    for note in sorted(selection):
        name, sep, reason = note.partition(": ")
        if sep and reason != "runs here" and not note.startswith(NO_KERNEL_NOTE):
            by_reason.setdefault(reason, []).append(name)
    return [f"{_names(names)}: {reason}" for reason, names in by_reason.items()]


def _kernels_idle(scoreboard) -> list[str]:
    """Kernels that have rows but compared none of them (all unsupported, or every one raised)."""
    idle = []
    for line in scoreboard:
        if not line.harness_only:
            c = line.counts
            idle.append(f"{line.backend} compared no case ({c['unsupported']:,} unsupported, "
                        f"{c['crash']:,} crash or error)")
    return idle


def _where(env) -> str:
    """Where the rows ran, when not on a GPU: 'the rows ran on cpu, with no GPU', or, where the machine had
    one (``--device cpu`` on a GPU box), 'the rows ran on cpu, not on the NVIDIA H200 there'."""
    values = dict(env)
    devices = [v for v, _ in values.get("device", [])]
    gpus = [v for v, _ in values.get("GPU", []) if v != "none (CPU)"]
    if not devices or "cuda" in devices:
        return ""
    where = f"not on the {', '.join(gpus)} there" if gpus else "with no GPU"
    return f"the rows ran on {', '.join(devices)}, {where}"


def why(data) -> str | None:
    """One plain paragraph: no kernel was verified, and why; None when a kernel was."""
    if not data.no_kernel:
        return None
    if not len(data.df):
        return ("No kernel was verified: the results hold no row (the run was given no case, as a shard is when "
                "there are fewer cases than shards, or it stopped before its first row).")
    backends = [line.backend for line in data.scoreboard]
    ran = [_harness_ran(backends)] if any(harness_only(b) for b in backends) else []
    parts = [*ran, *_kernels_idle(data.scoreboard)]
    said = _auto_said(data.extras.selection)
    if said:
        parts.append("auto found no kernel to run: " + "; ".join(said))
    elif not any(not harness_only(b) for b in backends):
        parts.append("no kernel was among the backends asked for")
    where = _where(data.env)
    if where:
        parts.append(where)
    return "No kernel was verified: " + "; ".join(parts) + "."
