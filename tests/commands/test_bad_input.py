"""The bad-input matrix: every kind of bad input gets one line, exit code 2, no traceback, no launch.

Runs that get as far as loading a backend use a plug-in whose ``run`` leaves a
marker file and raises, so a kernel launch (even in a worker process) is seen.
"""

import dataclasses
import errno
import fcntl
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from harness.backends.base import Backend
from harness.building.inputs import generate
from harness.building.pool import validate_block_table
from harness.cli import main
from harness.errors import InputError
from harness.planning.cases import Case, load_suite
from harness.recording.results import read_rows
from harness.running.runner import run_case
from harness.scenarios import _common as steps

REPO = Path(__file__).resolve().parents[2]

GOOD_GROUP = """
[[group]]
name = "g"
mode = "decode"
batch_size = 2
heads = 8
seqlen = "uniform:5:90"
"""


@pytest.fixture
def launches(tmp_path):
    """A plug-in backend spec, and the marker file its ``run`` would leave behind."""
    marker = tmp_path / "launched"
    plugin = tmp_path / "recorder.py"
    plugin.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from harness.backends.torch_backend import TorchBackend

        class Recorder(TorchBackend):
            name = "recorder"

            def run(self, inputs):
                Path({str(marker)!r}).write_text("run() was called")
                raise RuntimeError("a kernel was launched")
    """))
    return f"{plugin}:Recorder", marker


def suite_file(tmp_path, text, name="bad.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def assert_bad_input(capsys, argv, *fragments):
    """Exit code 2, exactly one stderr line, no traceback; returns that line."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (code, captured.out, captured.err)
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    assert lines[0].startswith("mla-verify: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def run_argv(suite, backend, tmp_path, *extra):
    return ["run", "--suite", suite, "--backend", backend, "--out", tmp_path / "out.jsonl",
            "--device", "cpu", "--no-progress", *extra]


# ---- case files ---------------------------------------------------------------------------------

def test_malformed_toml(tmp_path, capsys, launches):
    spec, marker = launches
    path = suite_file(tmp_path, "[[group]\nname = 'g'\n")
    assert_bad_input(capsys, run_argv(path, spec, tmp_path), str(path), "not valid TOML")
    assert not marker.exists()


def test_malformed_toml_in_a_subprocess_has_no_traceback(tmp_path, launches):
    spec, marker = launches
    path = suite_file(tmp_path, "[suite]\ndescription = 'unterminated\n" + GOOD_GROUP)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *map(str, run_argv(path, spec, tmp_path))],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("mla-verify: error: ") and str(path) in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("text, key", [
    ("[surprise]\nx = 1\n" + GOOD_GROUP, "surprise"),                        # top level
    ("[suite]\ndescriptoin = 'typo'\n" + GOOD_GROUP, "descriptoin"),          # [suite]
    ("[defaults]\nhead = 16\n" + GOOD_GROUP, "head"),                         # [defaults]
    (GOOD_GROUP + "pagesize = 64\n", "pagesize"),                             # a group
])
def test_unknown_key_names_file_and_key(tmp_path, capsys, launches, text, key):
    spec, marker = launches
    path = suite_file(tmp_path, text)
    assert_bad_input(capsys, run_argv(path, spec, tmp_path), str(path), f"'{key}'")
    assert not marker.exists()


# ---- impossible shapes, lengths and dtypes ------------------------------------------------------

@pytest.mark.parametrize("extra, key", [
    ("heads = 16\nkv_heads = 3", "heads"),
    ("d_qk = 576\nd_v = 640", "d_v"),
    ("page_size = 0", "page_size"),
    ("batch_size = 0", "batch_size"),
    ("kv_heads = 0", "kv_heads"),
    ("page_size = 1099511627776", "page_size"),     # refused before the allocator tries 2**40-slot pages
    ("shared_prefix = 100", "shared_prefix"),        # a radix cache shares whole pages only
    ("shared_prefix = -64", "shared_prefix"),
    ("pool_pages = 3", "pool_pages"),                # cannot hold two requests of up to 90 tokens
    ("pool_pages = -1", "pool_pages"),
    ("pool_pages = 1099511627776", "pool_pages"),
    ('scenario = "graph"\nshared_prefix = 64', "scenario"),
])
def test_impossible_shape(tmp_path, capsys, launches, extra, key):
    spec, marker = launches
    keys = {line.split("=")[0].strip() for line in extra.splitlines()}
    group = "\n".join(line for line in GOOD_GROUP.splitlines() if line.split("=")[0].strip() not in keys)
    path = suite_file(tmp_path, group + "\n" + extra + "\n")
    assert_bad_input(capsys, run_argv(path, spec, tmp_path), str(path), f"{key}:")
    assert not marker.exists()


def test_too_many_draft_tokens(tmp_path, capsys, launches):
    spec, marker = launches
    path = suite_file(tmp_path, GOOD_GROUP.replace('"decode"', '"verify"') + "draft_tokens = 9\n")
    assert_bad_input(capsys, run_argv(path, spec, tmp_path), "draft_tokens")
    assert not marker.exists()


@pytest.mark.parametrize("seqlen", ["list:-1", "list:5,-2,7", "uniform:-3:5", "equal:-64"])
def test_negative_seq_len(tmp_path, capsys, launches, seqlen):
    spec, marker = launches
    path = suite_file(tmp_path, GOOD_GROUP.replace('"uniform:5:90"', f'"{seqlen}"'))
    assert_bad_input(capsys, run_argv(path, spec, tmp_path), "seqlen", "negative")
    assert not marker.exists()


@pytest.mark.parametrize("line, key", [
    ("dtype = 5", "dtype"),
    ('dtype = "fp32"', "dtype"),
    ('dtype = ["bf16", "int8"]', "dtype"),
    ('page_size = "64"', "page_size"),
    ("page_size = 64.0", "page_size"),
    ("causal = 1", "causal"),
    ('softmax_scale = "0.07"', "softmax_scale"),
    ("softmax_scale = inf", "softmax_scale"),
    ("k_scale = nan", "k_scale"),
    ("k_scale = true", "k_scale"),
    ('tags = "smoke"', "tags"),
])
def test_dtype_mismatch(tmp_path, capsys, launches, line, key):
    spec, marker = launches
    path = suite_file(tmp_path, GOOD_GROUP + line + "\n")
    assert_bad_input(capsys, run_argv(path, spec, tmp_path), str(path), key)
    assert not marker.exists()


def test_tensor_dtype_mismatch_is_refused_by_the_gate():
    table = torch.ones(2, 3, dtype=torch.int64)
    with pytest.raises(InputError, match="int32"):
        validate_block_table(table, torch.tensor([10, 20], dtype=torch.int32), num_pages=8, page_size=16)


# ---- backends -----------------------------------------------------------------------------------

def write_module(tmp_path, body) -> Path:
    path = tmp_path / "plugin_mod.py"
    path.write_text(textwrap.dedent(body))
    return path


RAISES_AT_IMPORT = 'raise RuntimeError("boom at import")\n'
CONSTRUCTOR_RAISES = 'def B():\n    raise ValueError("no GPU here")\n'


@pytest.mark.parametrize("make_spec, fragments", [
    (lambda tmp: "no_such_backend", ["unknown backend 'no_such_backend'"]),
    (lambda tmp: "mutant:no_such_mutant", ["unknown mutant 'no_such_mutant'"]),
    (lambda tmp: f"{tmp / 'missing.py'}:Backend", ["file not found"]),
    (lambda tmp: "no_such_module_for_mla_verify:B", ["cannot import", "ModuleNotFoundError"]),
    (lambda tmp: f"{write_module(tmp, RAISES_AT_IMPORT)}:B", ["cannot import", "RuntimeError", "boom at import"]),
    (lambda tmp: f"{write_module(tmp, 'x = 1')}:Missing", ["no attribute 'Missing'"]),
    (lambda tmp: f"{write_module(tmp, 'x = 1')}:x", ["is not a harness.backends.Backend"]),
    (lambda tmp: f"{write_module(tmp, CONSTRUCTOR_RAISES)}:B", ["B() raised ValueError", "no GPU here"]),
], ids=["unknown-name", "unknown-mutant", "file-missing", "module-missing", "raises-at-import",
        "attribute-missing", "not-a-backend", "constructor-raises"])
def test_backend_that_does_not_load(tmp_path, capsys, make_spec, fragments):
    path = suite_file(tmp_path, GOOD_GROUP)
    assert_bad_input(capsys, run_argv(path, make_spec(tmp_path), tmp_path), *fragments)
    assert not (tmp_path / "out.jsonl").exists()     # refused before the results file was opened


def test_backend_raising_at_import_in_a_subprocess(tmp_path):
    plugin = write_module(tmp_path, "import nonexistent_dependency_of_a_kernel\n")
    path = suite_file(tmp_path, GOOD_GROUP)
    argv = run_argv(path, f"{plugin}:Backend", tmp_path)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *map(str, argv)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "nonexistent_dependency_of_a_kernel" in proc.stderr


# ---- results files ------------------------------------------------------------------------------

def unwritable_paths(tmp_path):
    regular = tmp_path / "a_file"
    regular.write_text("not a directory")
    return {"under a regular file": regular / "out.jsonl", "a directory": tmp_path,
            "under /proc": Path("/proc/mla-verify-cannot-write-here/out.jsonl")}


@pytest.mark.parametrize("which, fragment", [("under a regular file", "cannot write results file"),
                                              ("a directory", "is a directory"),
                                              ("under /proc", "cannot write results file")])
def test_out_that_cannot_be_written(tmp_path, capsys, launches, which, fragment):
    spec, marker = launches
    out = unwritable_paths(tmp_path)[which]
    path = suite_file(tmp_path, GOOD_GROUP)
    argv = ["run", "--suite", path, "--backend", spec, "--out", out, "--device", "cpu", "--no-progress"]
    assert_bad_input(capsys, argv, fragment, str(out))
    assert not marker.exists()


@pytest.mark.parametrize("which", ["under a regular file", "under /proc"])
def test_selfcheck_out_that_cannot_be_written(tmp_path, capsys, which):
    out = unwritable_paths(tmp_path)[which]
    argv = ["selfcheck", "--suite", suite_file(tmp_path, GOOD_GROUP), "--mutant", "lse_base2", "--out", out]
    assert_bad_input(capsys, argv, "cannot write results file")


@pytest.mark.parametrize("argv, fragment", [
    (["selfcheck", "--mutant", "no_such_mutant"], "unknown mutant 'no_such_mutant'"),
    (["selfcheck", "--suite", "no_such_suite"], "unknown suite 'no_such_suite'"),
    (["selfcheck", "--device", "tpu"], "invalid choice"),
])
def test_selfcheck_bad_flags(capsys, argv, fragment):
    assert_bad_input(capsys, argv, fragment)


# ---- output paths: each a regular file of its own ------------------------------------------------

def special_outputs(tmp_path) -> dict:
    """Outputs that are not regular files: writing there loses the output (or, as root, a device)."""
    directory = tmp_path / "a_dir"
    directory.mkdir()
    (tmp_path / "to_null").symlink_to("/dev/null")
    (tmp_path / "to_dir").symlink_to(directory)
    return {"/dev/full": Path("/dev/full"), "/dev/null": Path("/dev/null"), "a directory": directory,
            "a link to /dev/null": tmp_path / "to_null", "a link to a directory": tmp_path / "to_dir"}


def output_argv(suite, backend, flag, path, tmp_path):
    results = [] if flag == "--resume" else ["--out", tmp_path / "out.jsonl"]
    return ["run", "--suite", suite, "--backend", backend, *results, flag, path, "--device", "cpu",
            "--workers", "0", "--no-progress"]


@pytest.mark.parametrize("flag", ["--out", "--junit-xml", "--resume"])
@pytest.mark.parametrize("which", ["/dev/full", "/dev/null", "a directory", "a link to /dev/null",
                                   "a link to a directory"])
def test_output_that_is_not_a_regular_file(tmp_path, capsys, launches, flag, which):
    spec, marker = launches
    target = special_outputs(tmp_path)[which]
    if not target.exists():
        pytest.skip(f"{target} is not on this machine")
    was = target.stat()
    line = assert_bad_input(capsys, output_argv(suite_file(tmp_path, GOOD_GROUP), spec, flag, target, tmp_path),
                            flag, str(target))
    assert "is a directory" in line or "not a regular file" in line, line
    assert not marker.exists()
    now = target.stat()          # still the device or directory it was
    assert (now.st_mode, now.st_ino, now.st_rdev) == (was.st_mode, was.st_ino, was.st_rdev)


def one_file_spelled_twice(tmp_path) -> dict:
    """Pairs of paths that name one file: written once with a row, so a clobber shows."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"case_id": "s/g/0", "status": "pass"}\n')
    (tmp_path / "link.jsonl").symlink_to(rows)
    (tmp_path / "hard.jsonl").hardlink_to(rows)
    (tmp_path / "sub").mkdir()
    return {"the same path": (rows, rows), "another spelling": (rows, tmp_path / "sub" / ".." / "rows.jsonl"),
            "a symlink": (rows, tmp_path / "link.jsonl"), "a hard link": (rows, tmp_path / "hard.jsonl"),
            "a new file": (tmp_path / "new.jsonl", tmp_path / "new.jsonl")}


@pytest.mark.parametrize("results_flag", ["--out", "--resume"])
@pytest.mark.parametrize("which", ["the same path", "another spelling", "a symlink", "a hard link", "a new file"])
def test_results_and_junit_in_one_file(tmp_path, capsys, launches, results_flag, which):
    # `--out x --junit-xml x` exited 0 and every row was lost under the XML
    spec, marker = launches
    results, junit_path = one_file_spelled_twice(tmp_path)[which]
    before = results.read_bytes() if results.exists() else None
    argv = ["run", "--suite", suite_file(tmp_path, GOOD_GROUP), "--backend", spec, results_flag, results,
            "--junit-xml", junit_path, "--device", "cpu", "--workers", "0", "--no-progress"]
    assert_bad_input(capsys, argv, results_flag, "--junit-xml", "both name")
    assert not marker.exists()
    assert (results.read_bytes() if results.exists() else None) == before


# ---- the results file: one writer, validated whole before resume touches it -----------------------

def test_a_second_writer_is_refused_and_the_first_ones_file_kept(tmp_path, capsys, launches):
    # two runs appended to one --out at once: rows lost, torn fragments, both exited 0
    spec, marker = launches
    out = tmp_path / "out.jsonl"
    out.write_text('{"case_id": "s/g/0", "status": "pass"}\n')
    before = out.read_bytes()
    with open(out, "a") as first_writer:
        fcntl.flock(first_writer.fileno(), fcntl.LOCK_EX)
        for flag in ("--out", "--resume"):
            argv = ["run", "--suite", suite_file(tmp_path, GOOD_GROUP), "--backend", spec, flag, out,
                    "--device", "cpu", "--workers", "0", "--no-progress"]
            assert_bad_input(capsys, argv, str(out), "being written by another mla-verify run")
    assert out.read_bytes() == before, "the second writer emptied the first one's file"
    assert not marker.exists()


ROW = '{"case_id": "s/g/0", "status": "pass"}'
NOT_ROWS = {"null": "null", "a list": "[1, 2]", "an empty object": "{}", "a string": '"pass"',
            "no status": '{"case_id": "s/g/1"}', "no case id": '{"status": "pass"}',
            "a status that is not a string": '{"case_id": "s/g/1", "status": 1}', "not JSON": "pass s/g/1"}


@pytest.mark.parametrize("where", ["in the middle", "last, with its newline"])
@pytest.mark.parametrize("which", sorted(NOT_ROWS))
def test_resume_and_report_refuse_a_line_that_is_not_a_row(tmp_path, capsys, launches, which, where):
    spec, marker = launches
    path = tmp_path / "results.jsonl"
    if where == "in the middle":     # a torn last line too: dropping it must wait until the file validated
        text = f"{ROW}\n{NOT_ROWS[which]}\n{ROW}\n" + ROW[:20]
    else:
        text = f"{ROW}\n{ROW}\n{NOT_ROWS[which]}\n"
    path.write_text(text)
    line_no = 2 if where == "in the middle" else 3
    argv = ["run", "--suite", suite_file(tmp_path, GOOD_GROUP), "--backend", spec, "--resume", path,
            "--device", "cpu", "--workers", "0", "--no-progress"]
    resumed = assert_bad_input(capsys, argv, f"{path}:{line_no}:", "not an mla-verify result row")
    assert path.read_text() == text, "resume changed a file it refused"
    assert not marker.exists()
    reported = assert_bad_input(capsys, ["report", path, "-o", tmp_path / "r.html"], f"{path}:{line_no}:")
    assert reported == resumed, "report and resume disagree on what a row is"


def test_a_full_disk_is_one_line_and_keeps_the_rows_written(tmp_path):
    # a full disk gave two chained tracebacks and exit 1; RLIMIT_FSIZE makes the write fail the same way
    # (EFBIG where a full disk says ENOSPC), partway through a row, as a filling disk does
    whole = tmp_path / "whole.jsonl"
    assert main(["run", "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0",
                 "--out", str(whole), "--device", "cpu", "--workers", "0", "--no-progress"]) == 0
    row_bytes = len(whole.read_bytes())
    out = tmp_path / "out.jsonl"
    limit = 2 * row_bytes + row_bytes // 2         # two rows and then some: the third row is torn
    script = ("import resource, signal, sys\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
              "from harness.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    argv = ["run", "--suite", "smoke", "--backend", "torch", "--out", str(out), "--device", "cpu",
            "--workers", "0", "--no-progress", "--chunk", "1"]
    proc = subprocess.run([sys.executable, "-c", script, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mla-verify: error: ")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(errors) == 1 and errors[0] == proc.stderr.strip().splitlines()[-1], proc.stderr
    assert f"cannot write results file {out}" in errors[0]
    assert "verdict" not in proc.stdout, "a verdict was printed for a run whose rows were not all written"
    kept = read_rows(out)                          # the torn third row is skipped, with a warning
    assert len(kept) >= 2 and all(r["status"] == "pass" for r in kept)
    # with room again, --resume keeps those rows and runs the rest
    resumed = main([*argv[:5], "--resume", str(out), *argv[7:]])
    assert resumed == 0
    smoke = sorted(c.id for c in load_suite("smoke").cases)
    assert sorted(r["case_id"] for r in read_rows(out)) == smoke
    assert read_rows(out)[:len(kept)] == kept


def test_a_junit_file_that_cannot_be_written_is_one_line_before_any_verdict(tmp_path, capsys, monkeypatch):
    # `--junit-xml /dev/full` printed `verdict: PASSED (exit 0)` first, and then the error
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(ET.ElementTree, "write", disk_full)
    out, xml = tmp_path / "out.jsonl", tmp_path / "j.xml"
    argv = ["run", "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0", "--out", out,
            "--junit-xml", xml, "--device", "cpu", "--workers", "0", "--no-progress"]
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("mla-verify: error: ")]
    assert code == 2 and "Traceback" not in captured.err + captured.out
    assert errors == [captured.err.strip().splitlines()[-1]]
    assert f"--junit-xml {xml}: cannot write: {os.strerror(errno.ENOSPC)}" in errors[0]
    assert "verdict" not in captured.out
    assert [r["status"] for r in read_rows(out)] == ["pass"], "the results file was not kept whole"


# ---- block tables: the gate before every launch -------------------------------------------------

def small_case(**kw) -> Case:
    fields = dict(id="bad/gate/0", seed=11, batch_size=3, heads=8, seqlen="uniform:40:200", page_size=16)
    return Case(**{**fields, **kw})


def tampered(inputs, how: str):
    """A copy of ``inputs`` whose block table or seq lens no kernel may be launched on."""
    table, seq = inputs.block_table.clone(), inputs.cache_seqlens.clone()
    num_pages, page_size = inputs.kv_pool.shape[:2]
    if how == "id past the pool":
        table[1, 0] = num_pages
    elif how == "negative id":
        table[2, 0] = -1
    elif how == "huge id":
        table[0, 0] = 2**31 - 1
    elif how == "too few pages":
        table = table[:, :-1].contiguous()
        seq[0] = table.shape[1] * page_size + 1      # request 0 now needs the dropped column
    elif how == "seq len past the table":
        seq[2] = table.shape[1] * page_size + 1
    elif how == "negative seq len":
        seq[1] = -1
    return dataclasses.replace(inputs, block_table=table, cache_seqlens=seq)


TAMPERINGS = ["id past the pool", "negative id", "huge id", "too few pages", "seq len past the table",
              "negative seq len"]


@pytest.mark.parametrize("how", TAMPERINGS)
def test_validate_block_table_refuses(how):
    bad = tampered(generate(small_case()), how)
    with pytest.raises(InputError, match="request"):
        validate_block_table(bad.block_table, bad.cache_seqlens, bad.kv_pool.shape[0], bad.kv_pool.shape[1])


class Recorder(Backend):
    """Stands in for a kernel: counts launches."""

    name = "recorder"

    def __init__(self):
        from harness.backends.torch_backend import TorchBackend
        self.inner, self.calls = TorchBackend(), 0
        self.capabilities = self.inner.capabilities

    def unsupported_reason(self, case, device):
        return None

    def info(self):
        return {"api": "recorder"}

    def run(self, inputs):
        self.calls += 1
        return self.inner.run(inputs)


@pytest.mark.parametrize("how", TAMPERINGS)
def test_launch_gate_refuses_before_run(how):
    backend = Recorder()
    inputs = generate(small_case())
    steps.launch(backend, inputs)                 # the untouched inputs do launch
    assert backend.calls == 1
    with pytest.raises(InputError):
        steps.launch(backend, tampered(inputs, how))
    assert backend.calls == 1


def _tamper_generate(monkeypatch, how):
    real = steps.generate
    monkeypatch.setattr(steps, "generate", lambda case, device="cpu": tampered(real(case, device), how))


def test_runner_refuses_a_tampered_table(monkeypatch):
    _tamper_generate(monkeypatch, "id past the pool")
    backend = Recorder()
    with pytest.raises(InputError, match="outside the pool"):
        run_case(small_case(), backend, "recorder", "cpu")
    assert backend.calls == 0


def test_cli_refuses_a_tampered_table(tmp_path, capsys, monkeypatch, launches):
    spec, marker = launches
    _tamper_generate(monkeypatch, "too few pages")
    path = suite_file(tmp_path, GOOD_GROUP)
    code = main([str(a) for a in run_argv(path, spec, tmp_path, "--workers", "0")])
    err = capsys.readouterr().err
    # the run's header line comes first: the table is only built once the run has started
    errors = [line for line in err.splitlines() if line.startswith("mla-verify: error: ")]
    assert code == 2 and "Traceback" not in err
    assert len(errors) == 1 and "needs" in errors[0] and "columns" in errors[0], err
    assert err.strip().splitlines()[-1] == errors[0]
    assert not marker.exists()


def test_plugin_exiting_at_import_is_bad_input(tmp_path, capsys):
    plugin = write_module(tmp_path, "import sys\nsys.exit(0)\n")
    argv = run_argv(suite_file(tmp_path, GOOD_GROUP), f"{plugin}:B", tmp_path)
    assert_bad_input(capsys, argv, "cannot import", "SystemExit")     # not a silent exit 0


def test_plugin_with_broken_capabilities_is_its_error_not_a_traceback(tmp_path, capsys):
    # a plug-in bug, not bad input: each case is recorded as an error and the run exits 1
    plugin = write_module(tmp_path, "from harness.backends.torch_backend import TorchBackend\n"
                                    "class B(TorchBackend):\n    capabilities = None\n")
    argv = run_argv(suite_file(tmp_path, GOOD_GROUP), f"{plugin}:B", tmp_path, "--workers", "0")
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err + captured.out
    assert "unsupported_reason() raised AttributeError" in captured.out
