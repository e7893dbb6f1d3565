"""Every script under scripts/ earns its place, and each is run here, on the CPU.

A script that needs a GPU is checked for its syntax (``bash -n``) and its usage (``--help``), and, where it
has one, its refusal path (what it says without its inputs: one line, exit 2); the ones that do their work on
the CPU too (``same_rows.py``, ``setup_site.sh``, ``env.sh``, ``run_legacy.py`` with a stand-in kernel, the
GPU test lane on one test, ``install_kernels.sh`` without CUDA, the suite generator, ``synthetic_results.py``)
are run on small inputs and their output checked.  ``COVERED`` names, for every script, where it is run:
a new script without a check, or a check of a deleted one, fails ``test_every_script_is_checked``.
"""

import base64
import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO

SCRIPTS = REPO / "scripts"
GPU_LANES_AT_MOST = 12
HERE = "tests/project/test_scripts.py"
COVERED = {                          # script (under scripts/) -> the test file that runs it
    "check_imports.py": "tests/project/test_imports.py",
    "gen_sparse_upstream_suite.py": "tests/planning/test_sparse_upstream.py",
    "gen_upstream_suite.py": HERE,
    "install_kernels.sh": HERE,
    "probe_flashmla.py": HERE,
    "screenshot_report.sh": "tests/report/test_report.py",      # and its --help here
    "suite_from_rows.py": HERE,
    "synthetic_results.py": HERE,
    "gpu/bench.sh": HERE,
    "gpu/env.sh": HERE,
    "gpu/flashmla_own_test.sh": HERE,
    "gpu/kernels.sh": HERE,
    "gpu/run_legacy.py": HERE,
    "gpu/same_rows.py": HERE,
    "gpu/same_rows_across_trees.sh": HERE,
    "gpu/sanitize.sh": HERE,
    "gpu/setup_site.sh": HERE,
    "gpu/sparse_speed.sh": HERE,
    "gpu/speed.sh": HERE,
    "gpu/test.sh": HERE,
}
SHELL = sorted(name for name in COVERED if name.endswith(".sh"))
SOURCED = {"gpu/env.sh"}             # sourced, not run: no --help of its own


def scripts_on_disk() -> set[str]:
    return {p.relative_to(SCRIPTS).as_posix() for p in SCRIPTS.rglob("*")
            if p.is_file() and p.suffix in (".py", ".sh") and "__pycache__" not in p.parts}


def cpu_env(**extra) -> dict:
    """This interpreter first on PATH (as ``python3``: torch and the harness import), no GPU pretended."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLA_VERIFY", "CUDA_VISIBLE"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def run(args, cwd=REPO, **env):
    return subprocess.run(args, cwd=cwd, env=cpu_env(**env), capture_output=True, text=True, timeout=300)


def copied(tmp_path: Path, *names: str) -> Path:
    """A bare tree in ``tmp_path`` holding only these scripts: what a script sees where nothing was carried."""
    for name in names:
        (tmp_path / "scripts" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SCRIPTS / name, tmp_path / "scripts" / name)
    return tmp_path


def test_every_script_is_checked():
    assert scripts_on_disk() == set(COVERED), (
        f"scripts without a check: {sorted(scripts_on_disk() - set(COVERED))}; "
        f"checks of scripts that are gone: {sorted(set(COVERED) - scripts_on_disk())}")
    for name, where in COVERED.items():
        assert (REPO / where).exists() and (where == HERE or name in (REPO / where).read_text()), (name, where)


def test_the_gpu_lanes_are_few():
    lanes = sorted(n for n in scripts_on_disk() if n.startswith("gpu/"))
    assert len(lanes) <= GPU_LANES_AT_MOST, lanes


@pytest.mark.parametrize("name", SHELL)
def test_shell_scripts_parse(name):
    proc = run(["bash", "-n", str(SCRIPTS / name)])
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", [n for n in SHELL if n not in SOURCED])
def test_shell_scripts_print_their_usage(name):
    """``--help`` prints the header comment, a Usage line in it, and does nothing else (exit 0)."""
    proc = run(["bash", str(SCRIPTS / name), "--help"])
    header = (SCRIPTS / name).read_text().splitlines()[1].removeprefix("#").strip()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].strip() == header
    assert "Usage:" in proc.stdout and "#" not in proc.stdout.splitlines()[0]
    assert proc.stderr == ""


@pytest.mark.parametrize("name", ["gpu/same_rows.py", "gpu/run_legacy.py", "probe_flashmla.py",
                                  "synthetic_results.py"])
def test_python_scripts_print_their_usage(name):
    proc = run([sys.executable, str(SCRIPTS / name), "--help"])
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout.lower()


# --- the refusals: what a GPU script says where its inputs did not travel ---

@pytest.mark.parametrize("name, needs", [
    ("gpu/flashmla_own_test.sh", "carry .upstream"),
    ("gpu/same_rows_across_trees.sh", "no .base tree"),
])
def test_a_lane_without_its_carried_tree_says_so_in_one_line(tmp_path, name, needs):
    tree = copied(tmp_path, name, "gpu/env.sh")
    proc = run(["bash", str(tree / "scripts" / name)], cwd=tree)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needs in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_sanitize_without_a_case_or_a_sanitizer_is_bad_input(tmp_path):
    proc = run(["bash", str(SCRIPTS / "gpu/sanitize.sh")])
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "sanitize.sh: needs SUITE and CASE_ID (--help: usage)"]
    if any(Path("/usr/local").glob("cuda*/bin/compute-sanitizer")):
        pytest.skip("compute-sanitizer is installed here")
    proc = run(["bash", str(SCRIPTS / "gpu/sanitize.sh"), "edge", "edge/empty-rows/1"], CUDA_HOME=str(tmp_path))
    assert proc.returncode == 2 and "no compute-sanitizer" in proc.stderr


def test_the_probe_on_a_machine_without_cuda_says_so(tmp_path):
    """Its imports resolve (a moved module would show here), and without CUDA it refuses in one line."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc = run([sys.executable, str(SCRIPTS / "probe_flashmla.py")])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["probe_flashmla.py: torch sees no CUDA device; run it on a GPU box"]


def test_install_kernels_without_cuda_keeps_torch_and_says_what_verify_checks():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc = run(["bash", str(SCRIPTS / "install_kernels.sh"), sys.executable])
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device visible to torch: make verify checks the pure-PyTorch backend" in proc.stdout


# --- the lanes that work on the CPU too ---

def rows_file(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def example_rows() -> list[dict]:
    lines = (REPO / "reports/examples/verify-h200.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if '"status": "pass"' in line][:3]


def test_same_rows_sees_no_difference_in_timings_and_names_a_changed_metric(tmp_path):
    rows = example_rows()
    retimed = [dict(r, wall_s=r.get("wall_s", 0) + 1.0, kernel_ms=123.0, warm_up=i == 0) for i, r in enumerate(rows)]
    a, b = rows_file(tmp_path / "a.jsonl", rows), rows_file(tmp_path / "b.jsonl", retimed)
    proc = run([sys.executable, str(SCRIPTS / "gpu/same_rows.py"), str(a), str(b)])
    assert proc.returncode == 0 and "3 and 3 rows; 0 difference(s)" in proc.stdout, proc.stdout + proc.stderr

    moved = json.loads(json.dumps(rows))
    moved[1]["metrics"]["out"]["max_abs_err"] *= 1 + 1e-8          # its last digits, as a sum added otherwise
    c = rows_file(tmp_path / "c.jsonl", moved)
    proc = run([sys.executable, str(SCRIPTS / "gpu/same_rows.py"), str(a), str(c)])
    assert proc.returncode == 1 and "1 difference(s)" in proc.stdout and "{'max_abs_err': 1}" in proc.stdout
    proc = run([sys.executable, str(SCRIPTS / "gpu/same_rows.py"), str(a), str(c), "--close", "1e-6"])
    assert proc.returncode == 0, proc.stdout


def test_same_rows_can_leave_out_a_key_and_the_cases_one_tree_lacks(tmp_path):
    rows = example_rows()
    floored = json.loads(json.dumps(rows))
    floored[0]["metrics"]["noise_floor"] = {"emulation": "float32", "out": {"floor": 0.2, "over_floor": 1.1}}
    grown = floored + [dict(rows[0], case_id="smoke/new/0")]
    a, b = rows_file(tmp_path / "a.jsonl", rows), rows_file(tmp_path / "b.jsonl", grown)
    same_rows = [sys.executable, str(SCRIPTS / "gpu/same_rows.py"), str(a), str(b)]
    proc = run(same_rows)
    assert proc.returncode == 1 and "2 difference(s)" in proc.stdout, proc.stdout     # the floor, the new case
    proc = run([*same_rows, "--drop", "noise_floor", "--shared"])
    assert proc.returncode == 0 and "(3 in both compared, 1 in one only); 0 difference(s)" in proc.stdout, proc.stdout


def tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel of one module, ``tinypkg`` (``VALUE = 7``), written by hand."""
    files = {
        "tinypkg/__init__.py": "VALUE = 7\n",
        "tinypkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
        "tinypkg-0.1.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"),
    }
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for name, text in files.items()]
    files["tinypkg-0.1.dist-info/RECORD"] = "\n".join(record + ["tinypkg-0.1.dist-info/RECORD,,"]) + "\n"
    folder.mkdir()
    wheel = folder / "tinypkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def test_setup_site_installs_a_carried_wheel_set_offline_and_env_puts_it_on_the_path(tmp_path):
    tiny_wheel(tmp_path / ".whl-t")
    proc = run(["bash", str(SCRIPTS / "gpu/setup_site.sh"), "t", ".whl-t"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "installed 1 wheel(s) into .site/t"
    assert (tmp_path / ".site/t/tinypkg/__init__.py").read_text() == "VALUE = 7\n"

    (tmp_path / ".commit").write_text("abc1234\n")
    (tmp_path / ".site/mvc/flashinfer").mkdir(parents=True)     # the cache root: no wheel set, kept off the path
    sourced = (f". '{SCRIPTS / 'gpu/env.sh'}'; echo \"$PYTHONPATH\"; echo \"$MLA_VERIFY_COMMIT\"; "
               "python3 -c 'import tinypkg; print(tinypkg.VALUE)'")
    proc = run(["bash", "-c", sourced], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{tmp_path}:{tmp_path}/.site/t", "abc1234", "7"]


def test_setup_site_without_wheels_leaves_the_set_and_without_arguments_is_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run(["bash", str(SCRIPTS / "gpu/setup_site.sh"), "t", "empty"], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "no wheels in empty: .site/t left as it is"
    assert not (tmp_path / ".site").exists()
    proc = run(["bash", str(SCRIPTS / "gpu/setup_site.sh"), "t"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == "setup_site.sh: needs NAME and WHEEL_DIR (--help: usage)"


def test_run_legacy_adds_use_legacy_to_every_call_and_changes_nothing_else(tmp_path):
    """A stand-in ``flash_mla`` records its calls; the "test script" calls it as FlashMLA's tests do."""
    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel/flash_mla.py").write_text(
        "def flash_mla_with_kvcache(*args, **kwargs):\n    return args, kwargs\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/lib.py").write_text("NEIGHBOUR = 'imported'\n")     # a test's neighbour module
    (tmp_path / "tests/test_x.py").write_text(
        "import sys\nimport flash_mla\nimport lib\n"
        "print(flash_mla.flash_mla_with_kvcache(1, q=2))\n"
        "print(flash_mla.flash_mla_with_kvcache(use_legacy=False))\n"
        "print(__name__, lib.NEIGHBOUR, sys.argv)\n")
    test_script = str(tmp_path / "tests/test_x.py")
    proc = run([sys.executable, str(SCRIPTS / "gpu/run_legacy.py"), test_script, "--dtype", "bf16"],
               PYTHONPATH=str(tmp_path / "kernel"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "((1,), {'q': 2, 'use_legacy': True})",
        "((), {'use_legacy': False})",
        f"__main__ imported {[test_script, '--dtype', 'bf16']}",
    ]
    proc = run([sys.executable, str(SCRIPTS / "gpu/run_legacy.py")])
    assert proc.returncode == 2 and proc.stderr.strip() == "run_legacy.py: needs a test script (--help: usage)"


def test_the_gpu_test_lane_runs_the_tests_it_is_given(tmp_path):
    """On the CPU the lane still prints the versions and runs pytest on the files named (a dry run)."""
    log = tmp_path / "lane.log"
    proc = run(["bash", str(SCRIPTS / "gpu/test.sh"), "tests/project/test_scripts.py::test_the_gpu_lanes_are_few"],
               LOG=str(log), JOBS="1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = log.read_text()
    assert "\ntorch " in out and "1 passed" in out
    assert "bringing up nodes" in out         # spread over JOBS pytest processes (pytest-xdist)
    assert proc.stdout.strip().splitlines()[-1] == "test lane exit: 0"


def load_script(name: str, tmp_path: Path):
    """``scripts/NAME`` as a module whose ``__file__`` lies in ``tmp_path/scripts``: it writes there."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), SCRIPTS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.__file__ = str(tmp_path / "scripts" / name)
    (tmp_path / "cases").mkdir()
    return module


def test_the_dense_upstream_suite_is_what_its_generator_writes(tmp_path):
    load_script("gen_upstream_suite.py", tmp_path).main()
    written = (tmp_path / "cases/flashmla-upstream.toml").read_text()
    assert written == (REPO / "cases/flashmla-upstream.toml").read_text()


def test_synthetic_results_copies_rows_under_new_ids_and_stamps_a_gpu(tmp_path):
    source = example_rows()
    source[2] = dict(source[2], status="fail")
    src = rows_file(tmp_path / "src.jsonl", source)
    out = tmp_path / "out.jsonl"
    proc = run([sys.executable, str(SCRIPTS / "synthetic_results.py"), str(out), "5", str(src),
                "--failing", "0.4", "--gpu", "NVIDIA H100"])
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["fail", "fail", "pass", "pass", "pass"]
    ids = [r["case_id"] for r in rows]
    assert len(set(ids)) == 5 and all("#" in i for i in ids)
    assert {r["placement"]["name"] for r in rows} == {r["env"]["gpu"] for r in rows} == {"NVIDIA H100"}


def test_suite_from_rows_gives_each_drawn_case_back_with_its_fields(tmp_path):
    from harness.fuzz.draw import draw_case
    from harness.planning.cases import load_suite
    drawn = [draw_case(seed=5, index=i) for i in range(12)]
    rows = [{"case_id": c.id, "backend": b, "status": "pass", "case": dataclasses.asdict(c)}
            for c in drawn for b in ("torch", "other")] + [{"case_id": "x", "backend": "torch", "status": "pass"}]
    out = tmp_path / "drawn.toml"
    proc = run([sys.executable, str(SCRIPTS / "suite_from_rows.py"), str(rows_file(tmp_path / "r.jsonl", rows)),
                str(out), "--backend", "torch"])
    assert proc.returncode == 0, proc.stderr
    loaded = load_suite(str(out)).cases
    assert len(loaded) == len(drawn)        # each case once, though two backends ran it
    for before, after in zip(drawn, loaded):
        assert dataclasses.replace(after, id=before.id, seed=before.seed, suite_file="", tags=before.tags) == before
    empty = run([sys.executable, str(SCRIPTS / "suite_from_rows.py"), str(tmp_path / "r.jsonl"), str(out),
                 "--backend", "nobody"])
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "no row with a case" in empty.stderr
