"""The backend scoreboard: one line per backend, and whether any real kernel was verified at all.

The pure-PyTorch ``torch`` backend, the ``reference`` oracle and the mutants (deliberately broken
torch backends) check the harness, not a kernel.  Every other backend is a kernel: a built-in
one or a user's plug-in.  Names only, so the report never imports torch to decide.
"""

import math
from collections import Counter
from dataclasses import dataclass

from ..judging.checks import FLOOR_TENSORS, TENSORS
from ..recording.status import Status

HARNESS_BACKENDS = ("torch", "reference")
# worst |err|/bound of the gating checks (out, LSE; inf for a NaN/inf mismatch), as the findings quote it
ERR_COLUMNS = [f"{t.name}_ratio" for t in TENSORS if t.gating]
FLOOR_COLUMNS = [f"{name}_floor" for name in FLOOR_TENSORS]    # the kernel's error over its noise floor


def harness_only(backend: str) -> bool:
    return backend in HARNESS_BACKENDS or backend.startswith("mutant:")


@dataclass
class Line:
    backend: str
    kernel: str               # package and version, from the rows' backend_info
    counts: dict              # pass, fail, unsupported, crash (crash + error + timeout + harness_error)
    findings: int
    worst: float              # the largest |err|/bound of a gating check, any row (inf: NaN/inf)
    worst_case: str
    over_floor: float = math.nan    # the largest error over its noise floor, any row (NaN: no row says)

    @property
    def harness_only(self) -> bool:
        return harness_only(self.backend)


def kernel_name(info) -> str:
    info = info if isinstance(info, dict) else {}
    return " ".join(str(x) for x in (info.get("package"), info.get("version")) if x) or "no package recorded"


def lines(df, kernels: dict[str, Counter], findings) -> list[Line]:
    """One line per backend, in the order they first appear.  ``kernels``: backend -> Counter of kernel names."""
    found = Counter(f.backend for f in findings)
    out = []
    for backend, part in df.groupby("backend", sort=False) if len(df) else ():
        statuses = part["status"].value_counts()
        known = (Status.PASS, Status.FAIL, Status.UNSUPPORTED)
        counts = {"pass": int(statuses.get(Status.PASS, 0)), "fail": int(statuses.get(Status.FAIL, 0)),
                  "unsupported": int(statuses.get(Status.UNSUPPORTED, 0)),
                  "crash": int(sum(n for s, n in statuses.items() if s not in known))}
        scored = part[ERR_COLUMNS].max(axis=1, skipna=True).dropna()
        top = scored.idxmax() if len(scored) else None
        names = kernels.get(backend) or Counter()
        kernel = names.most_common(1)[0][0] if names else "no package recorded"
        if len(names) > 1:
            kernel += f" (+{len(names) - 1} other version{'s' if len(names) > 2 else ''})"
        out.append(Line(backend, kernel, counts, found[backend],
                        float(scored[top]) if top is not None else math.nan,
                        str(part.at[top, "case_id"]) if top is not None else "", _largest_finite(part, FLOOR_COLUMNS)))
    return out


def _largest_finite(part, columns: list[str]) -> float:
    """The largest finite value of these columns over the rows (NaN where none has one)."""
    present = [c for c in columns if c in part]
    values = part[present].to_numpy(dtype=float).ravel() if present else []
    finite = [v for v in values if math.isfinite(v)]
    return max(finite, default=math.nan)


def no_kernel_verified(df) -> bool:
    """True when no row of a real kernel was compared with the oracle (pass or fail)."""
    if not len(df):
        return True
    verified = df[df["status"].isin((Status.PASS, Status.FAIL))]
    return not any(not harness_only(b) for b in verified["backend"].unique())
