"""--resume keeps a row only when the same kernel, case definition and mla-verify made it.

Before, a row matched on the backend's name and the case id alone: after the kernel changed (same name,
a new version returning NaN) 0 cases ran and the verdict was PASSED; after a case's TOML changed the old
row was kept.  Every run here is in-process on the CPU (``--workers 0``).
"""

import dataclasses
import importlib.metadata
import json
import textwrap
import tomllib

from helpers import REPO

from harness import environment
from harness.cli import main
from harness.planning.cases import load_suite
from harness.recording.results import case_hash, read_rows, why_run_again

CASE = "smoke/decode-bf16/0"


def run(capsys, *argv):
    code = main([str(a) for a in argv] + ["--device", "cpu", "--workers", "0", "--no-progress"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    return code, out, err


def kernel_plugin(tmp_path, version: str, broken: bool) -> str:
    """A plug-in kernel named ``my-kernel`` at ``version``; a broken one answers NaN."""
    path = tmp_path / f"kernel_{version.replace('.', '_').replace('-', '_')}.py"
    path.write_text(textwrap.dedent(f"""
        from harness.backends.torch_backend import TorchBackend

        class Kernel(TorchBackend):
            name = "my-kernel"

            def info(self):
                return {{"package": "my-kernel", "version": {version!r}, "api": "decode"}}

            def run(self, inputs):
                out, lse = super().run(inputs)
                return (out * float("nan") if {broken!r} else out), lse
    """))
    return f"{path}:Kernel"


def test_a_changed_kernel_runs_again_and_the_line_says_why(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    code, _, _ = run(capsys, "run", "--suite", "smoke", "--backend", kernel_plugin(tmp_path, "1.0", False),
                     "--out", path)
    assert code == 0
    ran = len(read_rows(path))
    code, out, err = run(capsys, "run", "--suite", "smoke", "--backend",
                         kernel_plugin(tmp_path, "2.0-broken", True), "--resume", path)
    assert code == 1 and "verdict: FAILED" in out, "a changed kernel's old passes were kept"
    assert f"{ran} run again as their identity changed: kernel changed: 1.0 -> 2.0-broken ({ran})" in err
    assert f"{ran} case(s) from smoke" in err and "0 kept" in err
    latest = read_rows(path)[ran:]
    assert [r["backend_info"]["version"] for r in latest] == ["2.0-broken"] * ran


def suite_toml(tmp_path, group: str):
    path = tmp_path / "mine.toml"
    path.write_text(textwrap.dedent(f"""
        [suite]
        seed = 3

        [[group]]
        name = "g"
        batch_size = 2
        seqlen = "uniform:5:90"
        {group}
    """))
    return path


def test_a_changed_case_definition_runs_again(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    suite = suite_toml(tmp_path, 'mode = "decode"\nheads = 16\ndtype = "bf16"')
    assert run(capsys, "run", "--suite", suite, "--backend", "torch", "--out", path)[0] == 0
    # same suite, same group, same case id: another case
    suite = suite_toml(tmp_path, 'mode = "verify"\ndraft_tokens = 2\nheads = 128\ndtype = "fp8_e4m3"')
    code, out, err = run(capsys, "run", "--suite", suite, "--backend", "torch", "--resume", path)
    assert code == 0, out + err
    assert "1 run again as their identity changed: case definition changed (1)" in err
    rows = read_rows(path)
    assert [(r["case_id"], r["mode"], r["heads"]) for r in rows] == [("mine/g/0", "decode", 16),
                                                                    ("mine/g/0", "verify", 128)]
    # and now it is recorded: nothing runs
    code, out, err = run(capsys, "run", "--suite", suite, "--backend", "torch", "--resume", path)
    assert code == 0 and "0 case(s) from mine" in err and len(read_rows(path)) == 2


def test_rows_of_another_mla_verify_or_without_identity_run_again(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    assert run(capsys, "run", "--suite", "smoke", "--backend", "torch", "--out", path)[0] == 0
    rows = read_rows(path)
    rows[0]["mla_verify_version"] = "0.0.9"
    for row in rows[1:3]:                  # as a version before these fields wrote them
        del row["case_hash"], row["mla_verify_version"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run(capsys, "run", "--suite", "smoke", "--backend", "torch", "--resume", path)
    assert code == 0
    assert (f"3 run again as their identity changed: row has no identity (2), "
            f"mla-verify changed: 0.0.9 -> {environment.mla_verify_version()} (1)") in err
    assert f"{len(rows) - 3} kept" in err
    rerun = [r["case_id"] for r in read_rows(path)[len(rows):]]
    assert sorted(rerun) == sorted(r["case_id"] for r in rows[:3])


def test_every_row_records_its_identity(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    assert run(capsys, "run", "--suite", "smoke", "--backend", "torch", "--case", CASE, "--out", path)[0] == 0
    (row,) = read_rows(path)
    case = next(c for c in load_suite("smoke").cases if c.id == CASE)
    assert row["case_hash"] == case_hash(case.to_dict())
    assert row["mla_verify_version"] == environment.mla_verify_version()       # installed, or a checkout's pyproject
    assert why_run_again(row, row["backend_info"], row["case_hash"], row["mla_verify_version"]) is None


def test_the_case_hash_follows_the_definition_and_seed_not_where_the_suite_lies():
    case = load_suite("smoke").cases[0]
    again = load_suite("smoke").cases[0]
    assert case_hash(case.to_dict()) == case_hash(again.to_dict())
    moved = dataclasses.replace(case, suite_file="/elsewhere/smoke.toml")
    assert case_hash(moved.to_dict()) == case_hash(case.to_dict())
    for change in ({"seed": case.seed + 1}, {"heads": case.heads * 2}, {"seqlen": "equal:7"}):
        assert case_hash(dataclasses.replace(case, **change).to_dict()) != case_hash(case.to_dict()), change


def test_only_the_kernels_package_version_and_api_identify_it():
    row = {"backend_info": {"package": "p", "version": "1", "api": "a", "jit_build_s": {"x": 1.5}},
           "case_hash": "h", "mla_verify_version": "v"}
    timings_differ = {"package": "p", "version": "1", "api": "a", "jit_build_s": {"x": 9.0}}
    assert why_run_again(row, timings_differ, "h", "v") is None
    assert why_run_again(row, {**timings_differ, "api": "b"}, "h", "v") == "kernel changed: a -> b (api)"
    assert why_run_again(row, {**timings_differ, "version": "2"}, "h", "v") == "kernel changed: 1 -> 2"


def test_the_version_falls_back_to_pyproject_outside_an_install(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    environment.mla_verify_version.cache_clear()
    try:
        expected = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
        assert environment.mla_verify_version() == expected
    finally:
        environment.mla_verify_version.cache_clear()
