"""What became of one case on one backend: a typed outcome, and the result row that carries it.

Every row is built here, whatever happened: a comparison, an unsupported case,
a raise in some phase, a crash or a timeout (``result_row``, ``context_lost_row``).
``ResultRow.to_json`` is the one place a row's fields are laid out, so the results
file keeps one format.
"""

import dataclasses
import shlex
import time
from dataclasses import dataclass, field

from .. import environment
from ..environment import mla_verify_version
from ..judging import checks
from ..phases import KERNEL, is_out_of_memory, last_frames
from ..planning.fixed_params import as_run, fixed_by_kernel, fixed_scale, identity
from .results import case_hash
from .status import Status


@dataclass
class Outcome:
    status: Status
    reason: str | None = None
    failed_checks: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)          # per check, and a scenario's own numbers
    messages: list = field(default_factory=list)         # one line per failure
    warnings: list = field(default_factory=list)         # one line per non-gating check out of bounds
    diagnostics: dict | None = None                      # summaries for the report's drill-down
    details: dict = field(default_factory=dict)          # seq lens, k_scale, phase, traceback, ...
    kernel_ms: float | None = None
    phase_ms: dict = field(default_factory=dict)          # time per phase (inputs, kernel, oracle, compare)
    compared: bool = False      # judged by the oracle-and-compare step (a scenario's ``verdicts``)

    @property
    def reference_ms(self) -> float | None:
        """The oracle's and the comparison's milliseconds (the device's, where CUDA times the phases), for
        an outcome of the compare step; None for any other."""
        if not self.compared:
            return None
        return self.phase_ms.get("oracle", 0.0) + self.phase_ms.get("compare", 0.0)

    @classmethod
    def judged(cls, failed_checks: list, **fields) -> "Outcome":
        """A comparison's outcome: it passes when no check failed."""
        failed = list(failed_checks)
        return cls(Status.FAIL if failed else Status.PASS, "; ".join(failed) or None, failed, **fields)

    @classmethod
    def compared_with_oracle(cls, failed_checks: list, **fields) -> "Outcome":
        """An outcome of the oracle-and-compare step (``verdicts``): its row records ``reference_ms``."""
        return dataclasses.replace(cls.judged(failed_checks, **fields), compared=True)

    @classmethod
    def unsupported(cls, reason: str) -> "Outcome":
        return cls(Status.UNSUPPORTED, reason)

    @classmethod
    def raised(cls, phase: str, error: BaseException) -> "Outcome":
        """An exception: the kernel's ``error`` in its own phase, a ``harness_error`` in any other."""
        lines = [line for line in f"{type(error).__name__}: {error}".splitlines() if line.strip()]
        # one line; where that line only announces what follows (Triton's CompilationError: "at 128:21:", the
        # source, then the error) the last line too.  The whole message goes in the details.
        announces = len(lines) > 1 and lines[0].rstrip().endswith(":")
        message = (f"{lines[0]} … {lines[-1].strip()}" if announces else lines[0])[:500]
        frames = {"phase": phase, "traceback": last_frames(error),
                  **({"message": "\n".join(lines)[:4000]} if len(lines) > 1 else {})}
        if phase == KERNEL:
            return cls(Status.ERROR, message, [checks.RAISED], details=frames)
        oom = is_out_of_memory(error)
        reason = f"harness {phase} phase raised {message}" + (" (this machine cannot hold the case)" if oom else "")
        return cls(Status.HARNESS_ERROR, reason, [checks.harness_check(phase)],
                   details={**frames, "cannot_hold": oom})

    @classmethod
    def lost(cls, status: Status, reason: str) -> "Outcome":
        """The kernel's process died or hung: no answer to compare."""
        return cls(status, reason, [checks.CRASH if status is Status.CRASH else checks.TIMEOUT])

    def to_json(self) -> dict:
        row = {"status": self.status.value, "reason": self.reason}
        if self.status is not Status.UNSUPPORTED:
            row["failed_checks"] = self.failed_checks
        if self.metrics:
            row["metrics"] = self.metrics
        for name in ("messages", "warnings", "diagnostics"):
            if getattr(self, name):
                row[name] = getattr(self, name)
        if self.kernel_ms is not None or self.reference_ms is not None:
            row.update(kernel_ms=self.kernel_ms, reference_ms=self.reference_ms)
        if self.phase_ms:
            row["phase_ms"] = self.phase_ms
        row.update(self.details)
        return row


@dataclass(frozen=True)
class BackendIdentity:
    """Which backend ran, as the row records it."""

    name: str
    spec: str
    info: dict
    conventions: dict

    @classmethod
    def of(cls, backend, spec: str) -> "BackendIdentity":
        try:
            conventions = backend.capabilities.conventions()
            fixed_scale(conventions.get("fixed_softmax_scale"), 576)     # a bad declaration is broken too
        except Exception:   # a plug-in with broken capabilities still gets its rows
            conventions = {}
        return cls(backend.name, spec, backend.info(), conventions)


@dataclass
class ResultRow:
    """One case on one backend: the case, who ran it where, and the outcome."""

    case: object                  # harness.planning.cases.Case
    backend: BackendIdentity
    device: str
    env: dict
    outcome: Outcome
    rerun: str
    wall_s: float | None = None
    extra: dict = field(default_factory=dict)   # run-level facts, e.g. how ``auto`` chose

    def to_json(self) -> dict:
        # the case as it ran: a parameter the kernel fixes at the kernel's value, in the definition and its hash
        declared = self.backend.conventions.get("fixed_softmax_scale")
        fixed = fixed_by_kernel(self.case, declared)
        c = as_run(self.case, fixed)
        definition = c.to_dict()
        row = {
            "case_id": c.id, "suite": c.suite, "group": c.group, "seed": c.seed,
            "mode": c.mode, "dtype": c.dtype, "scenario": c.scenario,
            "batch_size": c.batch_size, "heads": c.heads, "kv_heads": c.kv_heads,
            "s_q": c.s_q, "page_size": c.page_size, "padding": c.padding, "causal": c.causal,
            "seqlen_dist": c.seqlen, "case": definition,
            # what --resume checks before it keeps this row for its case (results.why_run_again)
            "case_hash": case_hash(identity(definition, declared)), "mla_verify_version": mla_verify_version(),
            "backend": self.backend.name, "backend_spec": self.backend.spec, "backend_info": self.backend.info,
            "conventions": self.backend.conventions,
            **({"fixed_by_kernel": fixed} if fixed else {}),     # {parameter: [the case's, the kernel's]}
            "device": self.device, "env": self.env, "rerun": self.rerun,
        }
        row.update(self.outcome.to_json())
        if self.wall_s is not None:
            row["wall_s"] = self.wall_s
        row["finished_at"] = round(time.time(), 3)     # the report's wall clock: first start to last finish
        row.update(self.extra)
        return row


def rerun_command(case, backend_spec: str, device: str) -> str:
    """The command line that runs this one case again."""
    suite = shlex.quote(case.suite_file) if case.suite_file else case.suite
    return (f"mla-verify run --suite {suite} --backend {shlex.quote(backend_spec)} --device {device} "
            f"--case {case.id}")


def result_row(case, backend, backend_spec: str, device: str, outcome: Outcome, wall_s=None,
               phase_ms: dict | None = None, gpu: str | None = None, rerun: str | None = None,
               extra: dict | None = None) -> ResultRow:
    """A case's row.  ``phase_ms``: its phases' milliseconds (``phases.PhaseClock.read``), which also give
    its ``reference_ms``.  ``gpu``: the GPU it ran on, where the row is built in another process (a crash
    row, built by the parent) and this machine has GPUs.  ``rerun``: its rerun line, where not ``run``'s
    (``bench``'s)."""
    env = environment.describe()
    if gpu is not None and env.get("gpu"):
        env = {**env, "gpu": gpu}
    if phase_ms is not None:
        outcome = dataclasses.replace(outcome, phase_ms=phase_ms)
    return ResultRow(case, BackendIdentity.of(backend, backend_spec), device, env, outcome,
                     rerun or rerun_command(case, backend_spec, device), wall_s, dict(extra or {}))


def context_lost_row(row: dict) -> dict:
    """The row of the case that lost the CUDA context: its own row (an error), recorded as a crash."""
    return {**row, "status": Status.CRASH.value, "reason": f"CUDA context lost: {row['reason']}",
            "failed_checks": [checks.CRASH]}
