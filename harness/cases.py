"""Cases and suites: what to test, as data.

A suite is a TOML file in ``cases/``.  Each ``[[group]]`` is a grid: every key
whose value is a list is an axis, and the group expands to the product of its
axes times ``draws`` random draws.  Keys left out come from ``[defaults]``, then
from ``Case``'s own defaults.  Each case gets a stable id ``suite/group/index``
and a seed derived from that id and the suite's seed, so one case can be rebuilt
and rerun alone.
"""

import dataclasses
import itertools
import math
import os
import tomllib
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import seqlens
from .errors import InputError
from .pool import pages_for
from .sparse_cache import FORMATS

DTYPES = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
MODES = ("decode", "verify")
PADDINGS = ("minus_one", "one", "zero", "huge", "stale")
SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"


@lru_cache(maxsize=1)      # asked once per case; the files do not change during a run
def scenario_names() -> tuple[str, ...]:
    """The scenarios that exist: one module each in harness/scenarios (the files are the registry)."""
    return tuple(sorted(p.stem for p in SCENARIO_DIR.glob("*.py") if not p.stem.startswith("_")))
DEEPSEEK_SOFTMAX_SCALE = 192 ** -0.5   # 1/sqrt(qk_nope 128 + qk_rope 64)


@dataclass(frozen=True)
class Case:
    """One test: a shape, a dtype, a length distribution and a seed."""

    id: str
    seed: int
    mode: str = "decode"
    batch_size: int = 4
    heads: int = 16
    kv_heads: int = 1
    draft_tokens: int = 1
    dtype: str = "bf16"
    seqlen: str = "uniform:1:512"
    seqlen_is_cache: bool = False      # the draw is the kernel's cache_seqlens (FlashMLA's tests), not the prefix
    page_size: int = 64
    padding: str = "minus_one"
    causal: bool = True
    d_qk: int = 576
    d_v: int = 512
    softmax_scale: float = DEEPSEEK_SOFTMAX_SCALE
    k_scale: float | None = None       # fp8 only; None: amax(KV) / fp8 max
    extra_pages: int = 4               # unused, poisoned pages in the pool
    pool_pages: int = 0                # > 0: the pool's total pages, live ones spread over the whole range
    shared_prefix: int = 0             # tokens (whole pages) of one prefix every request shares, as a radix cache
    scenario: str = "call"
    # sparse MLA (scenario "sparse", docs/sparse.md); left at their defaults they are no part of a
    # case's definition (``to_dict``), so dense cases keep their hashes
    topk: int = 0                      # index entries per query token (SGLang's index_topk)
    kv_format: str = "v32"             # the cache record: harness/sparse_cache.FORMATS
    kv_scales: str = "amax"            # the writer's scale policy: "amax" (SGLang) or "ue8m0" (FlashMLA's tests)
    sink: str = "none"                 # attn_sink per head: "none", "random", "inf" (random with +-inf heads)
    index_pattern: str = "random"      # which positions the top-k lists: INDEX_PATTERNS
    verify_rows: str = "flattened"     # verify's query rows: "flattened" (SGLang: a row per draft, s_q 1) or
    #                                    "per_request" (vLLM: a row per request, s_q = drafts)
    tags: tuple = field(default=())
    suite_file: str = ""               # the suite's .toml path when it was given as one (reruns use it)

    @property
    def suite(self) -> str:
        return self.id.split("/")[0]

    @property
    def group(self) -> str:
        return self.id.split("/")[1]

    @property
    def s_q(self) -> int:
        """Query tokens per request: 1 for decode, the draft tokens for verify."""
        return self.draft_tokens if self.mode == "verify" else 1

    def max_cache_seqlen(self) -> int:
        return seqlens.max_length(self.seqlen, self.page_size) + self.s_q - (self.mode == "decode")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["tags"] = list(self.tags)
        for key in SPARSE_FIELDS:         # at their defaults: as before these fields existed
            if d[key] == CASE_DEFAULTS[key]:
                del d[key]
        return d


SPARSE_FIELDS = ("topk", "kv_format", "kv_scales", "sink", "index_pattern", "verify_rows")
CASE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Case)}
SINKS = ("none", "random", "inf")
# which context positions a query token's top-k lists (harness/sparse_inputs.py draws them): a random
# subset, the most recent ones, a random subset with -1 holes inside, one with repeated positions, none,
# random with the last third of the batch's requests all -1 (CUDA-graph / DP padding rows), and a random
# subset drawn for every row at once on the device, as FlashMLA's tests draw theirs ("batched")
INDEX_PATTERNS = ("random", "window", "holes", "repeat", "invalid", "padded", "batched")
VERIFY_ROWS = ("flattened", "per_request")

# Upper bounds that keep a typo from allocating the machine away (real models sit far below).
LIMITS = {"batch_size": 4096, "heads": 1024, "kv_heads": 1024, "draft_tokens": 1 << 10, "page_size": 1024,
          "d_qk": 4096, "d_v": 4096, "extra_pages": 1 << 16, "seqlen": 1 << 20,
          "pool_pages": 1 << 22, "topk": 1 << 16}

CASE_FIELDS = {f.name: f for f in dataclasses.fields(Case) if f.name not in ("id", "seed", "suite_file")}
GROUP_ONLY_KEYS = {"name", "draws", "seed"}


def validate_case(case: Case, where: str) -> Case:
    """Refuse impossible cases with one line naming the place and the field."""
    def bad(key, msg):
        raise InputError(f"{where}: {key}: {msg}")

    if case.mode not in MODES:
        bad("mode", f"unknown mode '{case.mode}' (known: {', '.join(MODES)})")
    if case.dtype not in DTYPES:
        bad("dtype", f"unknown dtype '{case.dtype}' (known: {', '.join(DTYPES)})")
    if case.padding not in PADDINGS:
        bad("padding", f"unknown padding policy '{case.padding}' (known: {', '.join(PADDINGS)})")
    if case.scenario not in scenario_names():
        bad("scenario", f"unknown scenario '{case.scenario}' (known: {', '.join(scenario_names())})")
    for key in ("batch_size", "heads", "kv_heads", "draft_tokens", "page_size", "d_qk", "d_v"):
        if getattr(case, key) < 1:
            bad(key, f"must be at least 1, got {getattr(case, key)}")
        if getattr(case, key) > LIMITS[key]:
            bad(key, f"{getattr(case, key)} is beyond the largest supported value {LIMITS[key]}")
    if case.extra_pages < 0:
        bad("extra_pages", f"must be at least 0, got {case.extra_pages}")
    if case.heads % case.kv_heads:
        bad("heads", f"{case.heads} query heads are not divisible by {case.kv_heads} kv heads")
    if case.d_v > case.d_qk:
        bad("d_v", f"d_v {case.d_v} is larger than d_qk {case.d_qk}")
    if case.mode == "verify" and not 1 <= case.draft_tokens <= 8:
        bad("draft_tokens", f"verify takes 1 to 8 draft tokens, got {case.draft_tokens}")
    if case.mode == "decode" and case.draft_tokens != 1:
        bad("draft_tokens", "decode has exactly one query token; use mode = \"verify\"")
    if not (math.isfinite(case.softmax_scale) and case.softmax_scale > 0):
        bad("softmax_scale", f"must be positive and finite, got {case.softmax_scale}")
    if case.k_scale is not None and not (math.isfinite(case.k_scale) and case.k_scale > 0):
        bad("k_scale", f"must be positive and finite, got {case.k_scale}")
    if case.extra_pages > LIMITS["extra_pages"]:
        bad("extra_pages", f"{case.extra_pages} is beyond the largest supported value {LIMITS['extra_pages']}")
    try:
        longest = seqlens.max_length(case.seqlen, case.page_size)
    except InputError as e:
        bad("seqlen", str(e))
    if longest > LIMITS["seqlen"]:
        bad("seqlen", f"lengths up to {longest} are beyond the largest supported {LIMITS['seqlen']}")
    _validate_scale_fields(case, bad)
    _validate_sparse_fields(case, bad)
    return case


def _validate_sparse_fields(case: Case, bad):
    """The sparse fields: set only for the sparse scenario, which needs a topk."""
    sparse = case.scenario == "sparse"
    if not sparse:
        for key in SPARSE_FIELDS:
            if getattr(case, key) != CASE_DEFAULTS[key]:
                bad(key, f"applies to the sparse scenario only (this case's scenario is '{case.scenario}')")
        return
    if not 1 <= case.topk <= LIMITS["topk"]:
        bad("topk", f"the sparse scenario needs 1 to {LIMITS['topk']} index entries, got {case.topk}")
    if case.kv_format not in FORMATS:
        bad("kv_format", f"unknown record format '{case.kv_format}' (known: {', '.join(FORMATS)})")
    fmt = FORMATS[case.kv_format]
    if case.kv_scales not in fmt.policies:
        bad("kv_scales", f"format {fmt.name} takes {', '.join(fmt.policies)}, not '{case.kv_scales}'")
    if case.sink not in SINKS:
        bad("sink", f"unknown sink '{case.sink}' (known: {', '.join(SINKS)})")
    if case.index_pattern not in INDEX_PATTERNS:
        bad("index_pattern", f"unknown index pattern '{case.index_pattern}' (known: {', '.join(INDEX_PATTERNS)})")
    if case.verify_rows not in VERIFY_ROWS:
        bad("verify_rows", f"unknown verify rows '{case.verify_rows}' (known: {', '.join(VERIFY_ROWS)})")
    if case.d_qk != fmt.d_qk or case.d_v != 512 or case.kv_heads != 1:
        bad("d_qk", f"format {fmt.name} holds d_qk {fmt.d_qk} with d_v 512 and one kv head, got d_qk "
                    f"{case.d_qk}, d_v {case.d_v}, kv_heads {case.kv_heads}")
    if case.dtype != "bf16":
        bad("dtype", f"sparse MLA takes bf16 q (the cache format sets the KV), got {case.dtype}")


def _validate_scale_fields(case: Case, bad):
    """``pool_pages`` and ``shared_prefix``: the serving-scale pool layout."""
    if case.shared_prefix < 0 or case.shared_prefix % case.page_size:
        # a radix cache with paged KV matches whole pages only
        bad("shared_prefix", f"must be a non-negative multiple of page_size {case.page_size}, "
                             f"got {case.shared_prefix}")
    if case.shared_prefix > LIMITS["seqlen"]:
        bad("shared_prefix", f"{case.shared_prefix} is beyond the largest supported {LIMITS['seqlen']}")
    if case.pool_pages < 0 or case.pool_pages > LIMITS["pool_pages"]:
        bad("pool_pages", f"must be 0 (sized to fit) or up to {LIMITS['pool_pages']}, got {case.pool_pages}")
    if case.pool_pages:
        worst = 1 + case.shared_prefix // case.page_size + case.batch_size * pages_needed(case)
        if case.pool_pages < worst:
            bad("pool_pages", f"{case.pool_pages} pages cannot hold the worst draw: page 0, the shared prefix "
                              f"and {case.batch_size} requests of up to {case.max_cache_seqlen()} tokens "
                              f"need {worst}")
    if case.scenario == "graph" and (case.pool_pages or case.shared_prefix):
        bad("scenario", "the graph scenario builds its own pool: pool_pages and shared_prefix do not apply")


def pages_needed(case: Case) -> int:
    """Pages of the longest request the case can draw."""
    return pages_for(case.max_cache_seqlen(), case.page_size)


def _coerce(key: str, value, where: str):
    """Check one TOML value against the Case field's type."""
    f = CASE_FIELDS[key]
    kind = {"int": int, "float": float, "bool": bool, "str": str}
    want = f.type if isinstance(f.type, type) else None
    if key == "k_scale":
        want = float
    if key == "tags":
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise InputError(f"{where}: tags: must be a list of strings")
        return tuple(value)
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want in kind.values() and (not isinstance(value, want) or (want is int and isinstance(value, bool))):
        raise InputError(f"{where}: {key}: expected {want.__name__}, got {type(value).__name__} {value!r}")
    return value


@dataclass
class Suite:
    name: str
    description: str
    path: Path
    cases: list[Case]


def cases_dir() -> Path:
    return Path(os.environ.get("MLA_VERIFY_CASES", Path(__file__).resolve().parent.parent / "cases"))


def suite_names() -> list[str]:
    return sorted(p.stem for p in cases_dir().glob("*.toml"))


def suite_path(name: str) -> Path:
    p = Path(name)
    if p.suffix == ".toml":
        if not p.is_file():
            raise InputError(f"suite file not found: {p}")
        return p
    p = cases_dir() / f"{name}.toml"
    if not p.is_file():
        raise InputError(f"unknown suite '{name}' (known: {', '.join(suite_names()) or 'none'}; "
                         f"or give a path to a .toml file)")
    return p


def load_suite(name: str) -> Suite:
    path = suite_path(name)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    suite = parse_suite(data, path)
    if Path(name).suffix == ".toml":     # given as a path: a rerun must name the same file
        suite.cases = [dataclasses.replace(c, suite_file=str(path)) for c in suite.cases]
    return suite


def parse_suite(data: dict, path: Path) -> Suite:
    name = path.stem
    unknown = set(data) - {"suite", "defaults", "group"}
    if unknown:
        raise InputError(f"{path}: unknown top-level key '{sorted(unknown)[0]}' (known: suite, defaults, group)")
    meta = data.get("suite", {})
    if not isinstance(meta, dict):
        raise InputError(f"{path}: [suite] must be a table")
    bad_meta = set(meta) - {"description", "seed"}
    if bad_meta:
        raise InputError(f"{path}: [suite]: unknown key '{sorted(bad_meta)[0]}' (known: description, seed)")
    suite_seed = meta.get("seed", 0)
    if not isinstance(suite_seed, int) or isinstance(suite_seed, bool):
        raise InputError(f"{path}: [suite]: seed must be an integer")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise InputError(f"{path}: [defaults] must be a table")
    groups = data.get("group", [])
    if not isinstance(groups, list) or not groups:
        raise InputError(f"{path}: no [[group]] tables")
    _check_keys(defaults, f"{path}: [defaults]", allow=set())
    cases: list[Case] = []
    seen = set()
    for gi, group in enumerate(groups):
        if not isinstance(group, dict):
            raise InputError(f"{path}: group {gi}: must be a table")
        gname = group.get("name")
        where = f"{path}: group '{gname}'" if gname else f"{path}: group {gi}"
        if not isinstance(gname, str) or not gname or "/" in gname:
            raise InputError(f"{where}: name: every group needs a name without '/'")
        if gname in seen:
            raise InputError(f"{where}: name: duplicate group name")
        seen.add(gname)
        _check_keys(group, where, allow=GROUP_ONLY_KEYS)
        cases.extend(_expand_group(name, suite_seed, {**defaults, **group}, where))
    return Suite(name, str(meta.get("description", "")), path, cases)


def _check_keys(table: dict, where: str, allow: set):
    for key in table:
        if key not in CASE_FIELDS and key not in allow:
            raise InputError(f"{where}: unknown key '{key}'")


def _expand_group(suite: str, suite_seed: int, group: dict, where: str) -> list[Case]:
    draws = group.get("draws", 1)
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 1:
        raise InputError(f"{where}: draws: must be a positive integer")
    seed = group.get("seed", suite_seed)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(f"{where}: seed: must be an integer")
    fields = {k: v for k, v in group.items() if k in CASE_FIELDS}
    axes = {k: v for k, v in fields.items() if isinstance(v, list) and k != "tags"}
    for k, v in axes.items():
        if not v:
            raise InputError(f"{where}: {k}: an empty list gives no cases")
    fixed = {k: _coerce(k, v, where) for k, v in fields.items() if k not in axes}
    out = []
    keys = list(axes)
    index = 0
    seen = set()
    for combo in itertools.product(*(axes[k] for k in keys)):
        values = {**fixed, **{k: _coerce(k, v, where) for k, v in zip(keys, combo)}}
        if "mode" in axes and values.get("mode") == "decode":
            # mode = ["decode", "verify"] with draft tokens: decode has one query token, once
            values["draft_tokens"] = 1
            key = tuple(sorted((k, str(v)) for k, v in values.items()))
            if key in seen:
                continue
            seen.add(key)
        for _ in range(draws):
            case_id = f"{suite}/{group['name']}/{index}"
            case = Case(id=case_id, seed=case_seed(case_id, seed), **values)
            out.append(validate_case(case, where))
            index += 1
    return out


def case_seed(case_id: str, suite_seed: int) -> int:
    """A stable 31-bit seed from a case id and its suite's seed."""
    return zlib.crc32(f"{suite_seed}:{case_id}".encode()) & 0x7FFFFFFF


def select(suites: list[Suite], case_id: str | None) -> list[Case]:
    cases = [c for s in suites for c in s.cases]
    if case_id is None:
        return cases
    chosen = [c for c in cases if c.id == case_id]
    if not chosen:
        raise InputError(f"no case '{case_id}' in suite(s) {', '.join(s.name for s in suites)}")
    return chosen
