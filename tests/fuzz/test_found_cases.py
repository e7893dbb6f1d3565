"""``cases/found/``: the shrunk failures the GPU campaigns kept, one corpus folder per kernel.

Each file is the kernel's failing case as its campaign wrote it; docs/kernel-findings.md ("Found by fuzzing")
maps each to its finding.  Two things make a file evidence, and both are checked here:

- its case is the one the kernel failed: a case's id, and so its seed and its values, come from the file's name
  (``fuzz.corpus``), whose last 8 hex digits are the hash of the definition inside; an edit or a rename breaks
  the pair;
- no error model fails an implementation that rounds once there: the torch backend (float32 throughout, one
  rounding of each product) passes every one of them on the CPU.  A kernel that rounds more and stays correct
  may still land over a bound; docs/kernel-findings.md says where that is a question (the sparse LSE item).
"""

import json
from pathlib import Path

from helpers import run_cli

from harness.fuzz import corpus
from harness.planning.cases import load_suite

FOUND = Path(__file__).resolve().parents[2] / "cases" / "found"
FILES = sorted(FOUND.glob("*/*.toml"))


def test_every_kernel_folder_holds_shrunk_cases_whose_names_match_their_definitions():
    assert len(FILES) >= 20 and len({f.parent.name for f in FILES}) >= 10
    for path in FILES:
        suite = load_suite(str(path))
        assert len(suite.cases) == 1, path
        assert path.stem.endswith("-" + corpus.definition_hash(suite.cases[0])), path
        header = path.read_text().splitlines()[1]
        assert header.startswith(f"# backend: {path.parent.name}"), (path, header)


def test_the_torch_backend_passes_every_case_a_kernel_failed(tmp_path):
    out = tmp_path / "found.jsonl"
    code, _, err = run_cli(["run", "--suite", ",".join(str(f) for f in FILES), "--backend", "torch",
                            "--device", "cpu", "--workers", "0", "--no-progress", "--out", out])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(FILES)
    assert {r["status"] for r in rows} == {"pass"}, [(r["case_id"], r["status"]) for r in rows if r["status"] != "pass"]
    assert code == 0, err
