"""Run cases against a backend and record one result row per case.

Per case: ask the backend whether it supports the case; build the inputs; check
the block table (no kernel ever sees an invalid one); run the kernel *before*
the oracle, so memory the oracle reuses cannot hide a bug; compare; append the
row to the results file.  Scenarios other than a single call live in
``scenarios.py``.
"""

import math
import time
from dataclasses import dataclass, field

import torch

from . import environment, scenarios
from .backends.base import Unsupported
from .cases import Case
from .errors import InputError
from .results import ResultsWriter


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def rerun_command(case: Case, backend_spec: str, device: str) -> str:
    return f"mla-verify run --suite {case.suite} --backend {backend_spec} --device {device} --case {case.id}"


def base_row(case: Case, backend, backend_spec: str, device: str) -> dict:
    return {
        "case_id": case.id, "suite": case.suite, "group": case.group, "seed": case.seed,
        "mode": case.mode, "dtype": case.dtype, "scenario": case.scenario,
        "batch_size": case.batch_size, "heads": case.heads, "kv_heads": case.kv_heads,
        "s_q": case.s_q, "page_size": case.page_size, "padding": case.padding, "causal": case.causal,
        "seqlen_dist": case.seqlen, "case": case.to_dict(),
        "backend": backend.name, "backend_spec": backend_spec, "backend_info": backend.info(),
        "device": device, "env": environment.describe(),
        "rerun": rerun_command(case, backend_spec, device),
    }


def run_case(case: Case, backend, backend_spec: str, device: str) -> dict:
    """Run one case and return its result row.  Bad input raises ``InputError``."""
    row = base_row(case, backend, backend_spec, device)
    started = time.perf_counter()
    try:
        reason = backend.unsupported_reason(case, device)
        if reason is not None:
            return {**row, "status": "unsupported", "reason": reason}
        outcome = scenarios.run(case, backend, device)
    except InputError:
        raise
    except Unsupported as e:   # the kernel's API refused the input at call time: quote it
        outcome = {"status": "unsupported", "reason": (str(e) or type(e).__name__).splitlines()[0][:500]}
    except Exception as e:   # the kernel (or its adapter) raised: record it, carry on
        outcome = {"status": "error", "reason": f"{type(e).__name__}: {e}".splitlines()[0][:500],
                   "failed_checks": ["raised"]}
    row.update(outcome)
    row["wall_s"] = time.perf_counter() - started
    return row


@dataclass
class RunSummary:
    rows: list = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(r["status"] == status for r in self.rows)

    @property
    def ok(self) -> bool:
        return all(r["status"] in ("pass", "unsupported") for r in self.rows)

    @property
    def cases_per_second(self) -> float:
        return len(self.rows) / self.seconds if self.seconds > 0 else math.inf


def crash_row_factory(backend, backend_spec: str, device: str):
    def crash_row(case, status, reason):
        return {**base_row(case, backend, backend_spec, device), "status": status, "reason": reason,
                "failed_checks": [status]}
    return crash_row


def run_cases(cases: list[Case], backend, backend_spec: str, device: str, writer: ResultsWriter,
              skip_ids: set | None = None, progress: bool = True, workers: int = 0,
              timeout_s: float = 300.0) -> RunSummary:
    """Run cases and write each row as it finishes.

    ``workers == 0`` runs in this process; otherwise kernels run in that many
    worker processes (``isolation.py``), so a crash or hang costs one case.
    Cases the backend does not support are recorded here without a worker.
    """
    from tqdm import tqdm

    skip_ids = skip_ids or set()
    todo = [c for c in cases if c.id not in skip_ids]
    summary = RunSummary()
    started = time.perf_counter()
    bar = tqdm(total=len(todo), desc=f"{backend.name}", unit="case", disable=not progress,
               dynamic_ncols=True, mininterval=0.5)

    not_passed = 0

    def record(row):
        nonlocal not_passed
        writer.write(row)
        summary.rows.append(row)
        not_passed += row["status"] not in ("pass", "unsupported")
        bar.set_postfix_str(f"not passed {not_passed}", refresh=False)
        bar.update(1)

    runnable = []
    for case in todo:
        try:
            reason = backend.unsupported_reason(case, device)
        except Exception as e:   # a plug-in's broken capability check is its error, on this case
            record({**base_row(case, backend, backend_spec, device), "status": "error", "failed_checks": ["raised"],
                    "reason": f"unsupported_reason() raised {type(e).__name__}: {e}".splitlines()[0][:500]})
            continue
        if reason is not None:
            record({**base_row(case, backend, backend_spec, device), "status": "unsupported", "reason": reason})
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
    summary.seconds = time.perf_counter() - started
    return summary
