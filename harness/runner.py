"""Run cases against a backend and record one result row per case.

Per case: ask the backend whether it supports the case; build the inputs; check
the block table (no kernel ever sees an invalid one); run the kernel *before*
the oracle, so memory the oracle reuses cannot hide a bug; compare; append the
row to the results file.  Scenarios other than a single call live in
``scenarios.py``.
"""

import shlex
import time
from dataclasses import dataclass, field

import torch

from . import environment, scenarios
from .cases import Case
from .errors import InputError
from .phases import KERNEL, PhaseError, is_out_of_memory, last_frames
from .results import ResultsWriter
from .status import Status, gates, verdict_of


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def rerun_command(case: Case, backend_spec: str, device: str) -> str:
    suite = shlex.quote(case.suite_file) if case.suite_file else case.suite
    return (f"mla-verify run --suite {suite} --backend {shlex.quote(backend_spec)} --device {device} "
            f"--case {case.id}")


def conventions_of(backend) -> dict:
    """The backend's declared conventions; a plug-in with broken capabilities gets its error row, not a crash."""
    try:
        return backend.capabilities.conventions()
    except Exception:
        return {}


def base_row(case: Case, backend, backend_spec: str, device: str) -> dict:
    return {
        "case_id": case.id, "suite": case.suite, "group": case.group, "seed": case.seed,
        "mode": case.mode, "dtype": case.dtype, "scenario": case.scenario,
        "batch_size": case.batch_size, "heads": case.heads, "kv_heads": case.kv_heads,
        "s_q": case.s_q, "page_size": case.page_size, "padding": case.padding, "causal": case.causal,
        "seqlen_dist": case.seqlen, "case": case.to_dict(),
        "backend": backend.name, "backend_spec": backend_spec, "backend_info": backend.info(),
        "conventions": conventions_of(backend),
        "device": device, "env": environment.describe(),
        "rerun": rerun_command(case, backend_spec, device),
    }


def status_row(case: Case, backend, backend_spec: str, device: str, status: Status, reason: str, **extra) -> dict:
    """The row of a case that has no comparison: unsupported, or something raised, crashed or hung."""
    row = {**base_row(case, backend, backend_spec, device), "status": status.value, "reason": reason, **extra}
    if status.gates:
        row["failed_checks"] = ["raised" if status is Status.ERROR else status.value]
    return row


def exception_outcome(e: PhaseError) -> dict:
    """The kernel's exception is its ``error``; any other phase's is the harness's."""
    err = e.error
    message = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    if e.phase == KERNEL:
        return {"status": Status.ERROR.value, "phase": KERNEL, "reason": message, "failed_checks": ["raised"],
                "traceback": last_frames(err)}
    oom = is_out_of_memory(err)
    reason = f"harness {e.phase} phase raised {message}"
    if oom:
        reason += " (this machine cannot hold the case)"
    return {"status": Status.HARNESS_ERROR.value, "phase": e.phase, "reason": reason, "cannot_hold": oom,
            "failed_checks": [f"harness.{e.phase}"], "traceback": last_frames(err)}


def run_case(case: Case, backend, backend_spec: str, device: str) -> dict:
    """Run one case and return its result row.  Bad input raises ``InputError``."""
    row = base_row(case, backend, backend_spec, device)
    started = time.perf_counter()
    try:
        reason = backend.unsupported_reason(case, device)
        if reason is not None:
            return {**row, "status": Status.UNSUPPORTED.value, "reason": reason}
        outcome = scenarios.run(case, backend, device)
    except InputError:
        raise
    except PhaseError as e:
        outcome = exception_outcome(e)
    except Exception as e:   # raised outside any phase: scenario glue, which is the harness's
        outcome = exception_outcome(PhaseError("scenario", e))
    row.update(outcome)
    row["wall_s"] = time.perf_counter() - started
    return row


@dataclass
class RunSummary:
    rows: list = field(default_factory=list)        # rows written by this invocation
    previous: list = field(default_factory=list)    # rows kept from the resumed file, for the cases asked for
    seconds: float = 0.0
    selection: list = field(default_factory=list)   # how ``auto`` chose its backends, line by line

    @property
    def all_rows(self) -> list:
        return self.previous + self.rows

    def count(self, status: str) -> int:
        return sum(r["status"] == status for r in self.all_rows)

    @property
    def verdict(self):
        return verdict_of(self.all_rows)

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def cases_per_second(self) -> float:
        return len(self.rows) / self.seconds if self.seconds > 0 else float("inf")


def crash_row_factory(backend, backend_spec: str, device: str):
    def crash_row(case, status, reason):
        return status_row(case, backend, backend_spec, device, Status(status), reason)
    return crash_row


def run_cases(cases: list[Case], backend, backend_spec: str, device: str, writer: ResultsWriter,
              skip_ids: set | None = None, progress: bool = True, workers: int = 0,
              timeout_s: float = 300.0, summary: RunSummary | None = None,
              row_extra: dict | None = None) -> RunSummary:
    """Run cases and write each row as it finishes.

    ``workers == 0`` runs in this process; otherwise kernels run in that many
    worker processes (``isolation.py``), so a crash or hang costs one case.
    Cases the backend does not support are recorded here without a worker.
    """
    from tqdm import tqdm

    skip_ids = skip_ids or set()
    todo = [c for c in cases if c.id not in skip_ids]
    summary = RunSummary() if summary is None else summary
    started = time.perf_counter()
    bar = tqdm(total=len(todo), desc=f"{backend.name}", unit="case", disable=not progress,
               dynamic_ncols=True, mininterval=0.5)

    not_passed = 0

    def record(row):
        nonlocal not_passed
        row.update(row_extra or {})
        writer.write(row)
        summary.rows.append(row)
        not_passed += gates(row["status"])
        bar.set_postfix_str(f"not passed {not_passed}", refresh=False)
        bar.update(1)

    runnable = []
    for case in todo:
        try:
            reason = backend.unsupported_reason(case, device)
        except Exception as e:   # a plug-in's broken capability check is its error, on this case
            record(status_row(case, backend, backend_spec, device, Status.ERROR,
                              f"unsupported_reason() raised {type(e).__name__}: {e}".splitlines()[0][:500],
                              phase=KERNEL, traceback=last_frames(e)))
            continue
        if reason is not None:
            record(status_row(case, backend, backend_spec, device, Status.UNSUPPORTED, reason))
        else:
            runnable.append(case)
    if workers:
        from .isolation import run_isolated
        run_isolated(runnable, backend_spec, device, record, crash_row_factory(backend, backend_spec, device),
                     workers=workers, timeout_s=timeout_s)
    else:
        for case in runnable:
            record(run_case(case, backend, backend_spec, device))
    bar.close()
    summary.seconds += time.perf_counter() - started
    return summary
