"""The report's data: result rows read back, one lean pandas frame, counts, environment, timing.

Everything the page shows is computed here from the results files alone, so a
report is rebuilt without rerunning anything.  Rows are streamed (``rows``): the
frame keeps only scalars (ids, statuses, error over bound per check), and the
drill-downs read their few whole rows again from the files.
"""

import math
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from ..judging.checks import TENSOR_NAMES
from ..recording import findings as clustering
from ..recording.reasons import Grouped, group_reasons
from ..recording.status import GATING, STATUSES, Status, Verdict, verdict_of
from . import findings as findings_mod
from . import gpu_models, scoreboard
from .columns import length, rows_of
from .gc_pause import uncollected
from .rows import Loaded, load, sample
from .shard_check import ShardCheck

BAD = GATING          # statuses that fail the gate
CHECKS = TENSOR_NAMES
GROUP_BY = ["suite", "backend", "mode", "dtype"]


def records(df: pd.DataFrame) -> list[dict]:
    """``df.to_dict("records")``, the same Python values, read a column at a time: a third of its time."""
    columns = list(df.columns)
    return [dict(zip(columns, values)) for values in zip(*(df[c].tolist() for c in columns))]


def status_columns(df: pd.DataFrame) -> list[str]:
    """The status vocabulary, plus any status a row carries outside it (so counts still add up)."""
    extra = sorted(set(df["status"]) - set(STATUSES)) if len(df) else []
    return [*STATUSES, *extra]


def counts(df: pd.DataFrame) -> pd.DataFrame:
    """Rows per status, by suite, backend, mode and dtype."""
    cols = status_columns(df)
    if not len(df):
        return pd.DataFrame(columns=cols)
    table = df.groupby([*GROUP_BY, "status"]).size().unstack(fill_value=0)
    return table.reindex(columns=cols, fill_value=0).sort_index()


def _kernel(row: dict) -> str:
    info = row.get("backend_info") if isinstance(row.get("backend_info"), dict) else {}
    parts = [str(info.get("package") or "?"), str(info.get("version") or "")]
    api = info.get("api")
    return " ".join(p for p in parts if p) + (f" ({api})" if api else "")


ENV_FIELDS = ["GPU", "driver", "CUDA", "torch", "kernel", "backend spec", "device", "commit", "host", "python"]


def env_values(row: dict) -> tuple[str, ...]:
    """The row's value of each of ``ENV_FIELDS``, as the Environment table shows it ("–" for none)."""
    env = row.get("env") if isinstance(row.get("env"), dict) else {}
    get = env.get
    values = (get("gpu") or "none (CPU)", get("driver"), get("cuda"), get("torch"),
              f"{row.get('backend', '?')}: {_kernel(row)}", row.get("backend_spec"), row.get("device"),
              get("commit"), get("host"), get("python"))
    return tuple([str(v or "–") for v in values])


class Extras:
    """What the page needs from whole rows beyond the lean record, gathered while each row is at hand."""

    def __init__(self):
        self.env_values: dict[tuple, int] = {}          # distinct environments, each an id
        self.kernels: dict[str, Counter] = {}           # backend -> its package and version names
        self.infos: dict[str, dict] = {}                # backend -> its first row's backend_info
        self.selection: set[str] = set()                # how auto chose
        self.bench: list[dict] = []                     # bench rows, whole (a few)
        self.shards = ShardCheck()                      # what a merge of shards lacks or repeats

    def __call__(self, row: dict, rec: dict):
        rec["env"] = self.env_values.setdefault(env_values(row), len(self.env_values))
        backend = rec["backend"]
        self.shards.see(row, backend)
        self.infos.setdefault(backend, row.get("backend_info"))
        self.kernels.setdefault(backend, Counter())[scoreboard.kernel_name(row.get("backend_info"))] += 1
        self.selection.update(str(n) for n in row.get("selection") or [])
        if isinstance(row.get("bench"), dict):
            self.bench.append(row)
        rec["sig"] = clustering.signature(row) if rec["status"] in BAD else None
        rec["sample"] = sample(row)

    def part(self) -> "Extras":
        """An empty one, to gather over one byte range of a file (``rows.load``)."""
        return Extras()

    def merge(self, part: "Extras", records: dict[str, list]):
        """Fold in what ``part`` gathered over the next range of a file; ``records`` are that range's (columns),
        their environment ids renumbered into this one's.  Merged in file order, it holds what reading the
        ranges one after another would."""
        ids = [self.env_values.setdefault(values, len(self.env_values)) for values in part.env_values]
        if "env" in records:
            records["env"] = [ids[e] for e in records["env"]]
        for backend, names in part.kernels.items():
            self.kernels.setdefault(backend, Counter()).update(names)
        for backend, info in part.infos.items():
            self.infos.setdefault(backend, info)
        self.selection |= part.selection
        self.bench += part.bench
        _merge_shards(self.shards, part.shards)


def _merge_shards(into: ShardCheck, part: ShardCheck):
    """``into`` as if it had seen ``part``'s rows too (what a ShardCheck holds is all sets, maxima and sums)."""
    for n, shards in part.seen.items():
        into.seen.setdefault(n, set()).update(shards)
    for n, cases in part.cases.items():
        into.cases[n] = max(into.cases.get(n, 0), cases)
    for key, labels in part.where.items():
        into.where.setdefault(key, set()).update(labels)
    into.unsharded += part.unsharded


def environment(df: pd.DataFrame, extras: Extras) -> list[tuple[str, list[tuple[str, int]]]]:
    """Each environment field with its distinct values and how many rows carry each."""
    per_env = df["env"].value_counts() if len(df) else {}
    seen = {name: Counter() for name in ENV_FIELDS}
    for values, env_id in extras.env_values.items():
        n = int(per_env.get(env_id, 0))
        for name, value in zip(ENV_FIELDS, values):
            if n:
                seen[name][value] += n
    return [(name, seen[name].most_common()) for name in ENV_FIELDS]


def timing(df: pd.DataFrame) -> dict:
    """The summed case time (each row's ``wall_s``), and the wall clock where rows carry when they ended:
    the first case's start to the last case's end.  A row with ``finished_at`` but no ``started_at``
    started ``wall_s`` before it finished."""
    summed = float(df["wall_s"].sum(skipna=True)) if len(df) else 0.0
    kernel = df["kernel_ms"].dropna() if len(df) else pd.Series(dtype=float)
    if len(df):
        started = df["started_at"].fillna(df["finished_at"] - df["wall_s"].fillna(0.0))
        stamped = df.assign(started_at=started).dropna(subset=["started_at", "finished_at"])
    else:
        stamped = df
    wall = float(stamped["finished_at"].max() - stamped["started_at"].min()) if len(stamped) else math.nan
    warm = df["kernel_ms"][df["warm_up"]].dropna() if len(df) and "warm_up" in df else pd.Series(dtype=float)
    return {
        "cases": len(df), "summed_s": summed, "wall_s": wall, "stamped": len(stamped),
        "cases_per_second": len(df) / wall if wall > 0 else math.nan,
        "kernel_s": float(kernel.sum()) / 1e3, "kernel_median_ms": float(kernel.median()) if len(kernel) else math.nan,
        "warm_up_cases": len(warm), "warm_up_kernel_s": float(warm.sum()) / 1e3,
    }


SHOWN_REASONS = 8      # unsupported reasons listed, grouped by their text with the numbers set aside


def unsupported_reasons(df: pd.DataFrame, top: int = SHOWN_REASONS) -> Grouped:
    """The unsupported rows' reasons in groups, as the console summary lists them (``recording.reasons``)."""
    reasons = df.loc[df["status"] == Status.UNSUPPORTED, "reason"] if len(df) else ()
    return group_reasons(reasons, top)


EMPTY_COLUMNS = ["i", "case_id", "backend", "gpu", "status", "worst", "env", "sig", "where"]


def frame(records: dict[str, list]) -> tuple[pd.DataFrame, list]:
    """The lean records (columns, ``rows.load``) as one frame (column ``i`` is the row's index), and their
    out samples beside it."""
    n = length(records)
    if not n:
        return pd.DataFrame.from_records([], columns=EMPTY_COLUMNS), []
    columns = {key: values for key, values in records.items() if key != "sample"}
    columns["i"] = list(range(n))
    return pd.DataFrame(columns), records.get("sample") or [None] * n


@dataclass
class ReportData:
    sources: list[tuple[str, int]]              # (path, rows read)
    loaded: Loaded                              # reads a record's whole row again (``row_of``)
    df: pd.DataFrame                            # one line per latest row of a case and backend; ``i`` its index
    samples: list                               # per row: (positions key, out values) or None
    superseded: int
    counts: pd.DataFrame
    statuses: list[str]
    env: list
    timing: dict
    unsupported: Grouped                        # the unsupported rows' reasons, grouped (``recording.reasons``)
    verdict: Verdict                            # the same verdict the CLI gives these rows
    extras: Extras
    findings: list                              # findings.Finding, most cases first
    scoreboard: list                            # scoreboard.Line per backend
    no_kernel: bool                             # no real kernel was verified: the harness alone was
    baseline: dict | None = None                # see baseline.diff_against
    drill: list[int] = field(default_factory=list)    # row indices that get a drill-down
    drill_total: int = 0                        # failing rows (drill-downs may be capped)
    shard_problems: list = field(default_factory=list)   # shards absent or repeated (``shard_check``)
    gpu_differ: dict = field(default_factory=dict)      # (case, backend) -> {GPU model: status} (``gpu_models``)

    def row_of(self, i: int) -> dict:
        """The whole row behind frame line ``i``, read again from its file."""
        return self.loaded.row(self.df.at[i, "where"])


def collect(paths) -> ReportData:
    """The report's data from results files (``gc_pause``: nothing collected while it piles up)."""
    with uncollected():
        extras = Extras()
        loaded = load(paths, keep=extras)
        verdict = verdict_of(rows_of(loaded.records, ["status", "cannot_hold"]))
        df, samples = frame(loaded.records)
        loaded.records = {}                         # the frame holds them now
        gpu_differ = gpu_models.mark_contrasts(df)   # several GPU models: where one kernel's verdict differs
        found = findings_mod.cluster(records(df[df["sig"].notna()]) if len(df) else [])
        return ReportData(sources=loaded.sources, loaded=loaded, df=df, samples=samples, superseded=loaded.superseded,
                          counts=counts(df), statuses=status_columns(df), env=environment(df, extras),
                          timing=timing(df), unsupported=unsupported_reasons(df), verdict=verdict, extras=extras,
                          findings=found, scoreboard=scoreboard.lines(df, extras.kernels, found),
                          no_kernel=scoreboard.no_kernel_verified(df), shard_problems=extras.shards.problems(),
                          gpu_differ=gpu_differ)


def choose_drilldowns(df: pd.DataFrame, limit: int) -> tuple[list[int], int]:
    """Failing rows get a drill-down, the new failures first, then the largest error over bound."""
    bad = df[df["status"].isin(BAD)]
    if "mark" in bad.columns:
        bad = bad.assign(_new=(bad["mark"] != "new failure"))
        bad = bad.sort_values(["_new", "worst"], ascending=[True, False], na_position="last")
    else:
        bad = bad.sort_values("worst", ascending=False, na_position="last")
    return [int(i) for i in bad["i"].head(max(limit, 0))], len(bad)
