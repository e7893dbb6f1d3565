"""The corpus: each shrunk failure kept as a one-case suite file (the format of ``cases/*.toml``), named by
its signature and a short hash of its definition, and replayed first by the next campaign.

A suite file derives its case's seed from the case's id (``cases.case_seed``), and the id from the file's
name: ``suite_case`` gives a case the id and seed its file will give it, so shrinking runs each candidate
exactly as its file will load.
"""

import dataclasses
import json
import os
from pathlib import Path

from ..planning.case import CASE_DEFAULTS, Case
from ..planning.cases import case_seed, load_suite
from ..recording.results import case_hash
from .signature import slug

GROUP = "shrunk"
NOT_WRITTEN = ("id", "seed", "suite_file", "tags")      # the file gives the first three; tags are no test
ALWAYS_WRITTEN = ("mode", "seqlen")                     # read first, defaults or not


def definition_hash(case: Case) -> str:
    """Eight hex digits of the case's definition, without its id and seed."""
    definition = {k: v for k, v in case.to_dict().items() if k not in NOT_WRITTEN}
    return case_hash(definition)[:8]


def stem(sig: tuple, case: Case) -> str:
    return f"{slug(sig)}-{definition_hash(case)}"


def suite_case(case: Case, sig: tuple, suite_seed: int) -> Case:
    """``case`` with the id and seed its one-case suite file (seeded ``suite_seed``) will give it."""
    case_id = f"{stem(sig, case)}/{GROUP}/0"
    return dataclasses.replace(case, id=case_id, seed=case_seed(case_id, suite_seed), suite_file="")


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)         # a TOML basic string: JSON's escapes are TOML's


def toml_fields(case: Case) -> dict:
    """The fields the file sets: mode and seqlen, then every other one away from its default."""
    fields = {k: getattr(case, k) for k in ALWAYS_WRITTEN}
    fields.update({k: v for k, v in vars(case).items()
                   if k not in NOT_WRITTEN and k not in fields and v != CASE_DEFAULTS[k]})
    return fields


def suite_text(case: Case, suite_seed: int, description: str, notes: list[str]) -> str:
    return groups_text([(GROUP, case)], suite_seed, description, notes)


def groups_text(groups: list[tuple[str, Case]], suite_seed: int, description: str, notes=()) -> str:
    """A suite file of one group per ``(name, case)``, each writing the case's ``toml_fields``."""
    lines = [f"# {note}" for note in notes]
    lines += ["[suite]", f"description = {toml_value(description)}", f"seed = {suite_seed}"]
    for name, case in groups:
        lines += ["", "[[group]]", f"name = {toml_value(name)}"]
        lines += [f"{k} = {toml_value(v)}" for k, v in toml_fields(case).items()]
    return "\n".join(lines) + "\n"


def path_of(directory: str | Path, case: Case) -> Path:
    """Where the case's file is: its suite name (``suite_case``'s id) is the file's name."""
    return Path(directory) / f"{case.suite}.toml"


def keep(directory: str | Path, case: Case, suite_seed: int, description: str, notes: list[str]):
    """Write the case's file unless the corpus has it already; returns (the case as the file loads it,
    whether it was there before)."""
    path = path_of(directory, case)
    existed = path.is_file()
    if not existed:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".toml.partial")
        partial.write_text(suite_text(case, suite_seed, description, notes))
        os.replace(partial, path)            # a reader never sees half a file
    return load_suite(str(path)).cases[0], existed


def files(directory: str | Path) -> list[Path]:
    """The corpus's suite files, in name order (none where the folder does not exist yet)."""
    folder = Path(directory)
    return sorted(folder.glob("*.toml")) if folder.is_dir() else []


def replay_cases(directory: str | Path) -> list[Case]:
    """Every case the corpus keeps, as its file loads it (a bad file is bad input, named)."""
    return [c for path in files(directory) for c in load_suite(str(path)).cases]
