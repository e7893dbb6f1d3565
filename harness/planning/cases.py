"""Cases and suites: what to test, as data.

A suite is a TOML file in ``cases/``.  Each ``[[group]]`` is a grid: every key
whose value is a list is an axis, and the group expands to the product of its
axes times ``draws`` random draws.  Keys left out come from ``[defaults]``, then
from ``Case``'s own defaults.  Each case gets a stable id ``suite/group/index``
and a seed derived from that id and the suite's seed, so one case can be rebuilt
and rerun alone.

This module reads the files; the ``Case`` and its vocabulary are ``case``, its checks ``case_checks``.
Re-exported here, as tests and plug-ins import them from ``cases``: ``Case``, ``validate_case``,
``pages_needed``, ``scenario_names`` and the vocabulary (``DTYPES``, ``MODES``, ``PADDINGS``, ...).
"""

import dataclasses
import itertools
import os
import tomllib
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .case import (  # noqa: F401  (re-exported: see the module doc)
    CASE_DEFAULTS,
    DEEPSEEK_SOFTMAX_SCALE,
    DTYPES,
    INDEX_PATTERNS,
    MODES,
    PADDINGS,
    SINKS,
    SPARSE_FIELDS,
    VERIFY_ROWS,
    Case,
    scenario_names,
)
from .case_checks import LIMITS, pages_needed, validate_case  # noqa: F401

CASE_FIELDS = {f.name: f for f in dataclasses.fields(Case) if f.name not in ("id", "seed", "suite_file")}
GROUP_ONLY_KEYS = {"name", "draws", "seed"}


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
    return Path(os.environ.get("MLA_VERIFY_CASES", Path(__file__).resolve().parent.parent.parent / "cases"))


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


def select(suites: list[Suite], spec: str | None) -> list[Case]:
    """Every case of ``suites``, or those ``spec`` names: case ids (suite/group/index) and groups
    (suite/group), comma-separated, in the order named."""
    cases = [c for s in suites for c in s.cases]
    if not spec:
        return cases
    chosen = []
    for wanted in (w.strip() for w in spec.split(",") if w.strip()):
        hit = [c for c in cases if c.id == wanted or c.id.startswith(wanted.rstrip("/") + "/")]
        if not hit:
            raise InputError(f"--case: no case or group '{wanted}' in suite(s) {', '.join(s.name for s in suites)}")
        chosen.extend(c for c in hit if c not in chosen)
    return chosen
