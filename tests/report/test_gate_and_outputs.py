"""``report``: a regression gate that compared nothing says so, and ``-o`` never replaces what is not a
report file (a device node, a directory, a link to one, an input)."""

import json
import os
import stat

import pytest
from helpers import REPO, run_cli

from harness.commands import report_cmd
from harness.planning.cases import load_suite

ONE_CASE = load_suite("smoke").cases[0].id
NOTHING_IN_COMMON = "no (case, backend) pair in common"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One smoke case on the torch backend, run once for the module."""
    path = tmp_path_factory.mktemp("runs") / "r.jsonl"
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--case", ONE_CASE,
                                "--out", path, "--workers", "0", "--no-progress"])
    finally:
        os.chdir(cwd)
    assert code == 0, err
    return path


def baseline_with(results, tmp_path, **changes):
    """A copy of the results whose rows have ``changes`` applied: another backend, another case id."""
    path = tmp_path / "base.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, **changes}) + "\n" for r in rows))
    return path


# ---- the regression gate with nothing in common -------------------------------------------------

@pytest.mark.parametrize("changes", [{"backend": "flashmla"}, {"case_id": "smoke/elsewhere/0"}])
def test_a_baseline_with_no_pair_in_common_fails_the_gate(results, tmp_path, changes):
    base = baseline_with(results, tmp_path, **changes)
    code, out, err = run_cli(["report", results, "--baseline", base, "-o", tmp_path / "r.html",
                              "--fail-on-regression"])
    assert code == 1
    assert out.strip() == str(tmp_path / "r.html")             # the report is still written
    assert err.count("\n") == 1 and NOTHING_IN_COMMON in err
    assert "backends now: torch" in err
    assert f"in the baseline: {changes.get('backend', 'torch')}" in err


def test_without_the_gate_the_line_is_said_and_the_exit_is_normal(results, tmp_path):
    base = baseline_with(results, tmp_path, backend="flashmla")
    code, _, err = run_cli(["report", results, "--baseline", base, "-o", tmp_path / "r.html"])
    assert code == 0
    assert NOTHING_IN_COMMON in err


def test_a_baseline_that_matches_says_nothing_of_the_kind(results, tmp_path):
    base = baseline_with(results, tmp_path)
    code, _, err = run_cli(["report", results, "--baseline", base, "-o", tmp_path / "r.html",
                            "--fail-on-regression"])
    assert code == 0, err
    assert NOTHING_IN_COMMON not in err


# ---- -o: a regular file or nothing yet ---------------------------------------------------------

def refused(argv, monkeypatch) -> str:
    """Runs ``report ARGV``, which must refuse before it writes anything; returns its one error line."""
    def must_not_write(*args, **kwargs):
        raise AssertionError("the report was written")
    monkeypatch.setattr(report_cmd, "write_report", must_not_write)
    code, _, err = run_cli(["report", *argv])
    assert code == 2, err
    assert err.startswith("mla-verify: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_a_device_is_refused_and_never_replaced(results, device, monkeypatch):
    err = refused([results, "-o", device], monkeypatch)
    assert f"-o {device}: is a device" in err
    assert stat.S_ISCHR(os.stat(device).st_mode)


def test_a_link_to_a_device_is_refused(results, tmp_path, monkeypatch):
    link = tmp_path / "null.html"
    link.symlink_to("/dev/null")
    assert "is a device" in refused([results, "-o", link], monkeypatch)
    assert link.is_symlink()


@pytest.mark.parametrize("make", ["directory", "link to a directory", "fifo"])
def test_what_is_not_a_regular_file_is_refused(results, tmp_path, monkeypatch, make):
    target = tmp_path / "out.html"
    if make == "directory":
        target.mkdir()
    elif make == "link to a directory":
        (tmp_path / "d").mkdir()
        target.symlink_to(tmp_path / "d")
    else:
        os.mkfifo(target)
    err = refused([results, "-o", target], monkeypatch)
    assert ("is a directory" if "directory" in make else "not a regular file") in err


@pytest.mark.parametrize("which", ["results", "baseline"])
def test_an_input_file_is_refused(results, tmp_path, monkeypatch, which):
    base = baseline_with(results, tmp_path)
    before = base.read_text(), results.read_text()
    target = results if which == "results" else base
    err = refused([results, "--baseline", base, "-o", target], monkeypatch)
    assert "is one of the input files" in err
    assert (base.read_text(), results.read_text()) == before


def test_a_link_to_a_regular_file_writes_the_report_where_it_points(results, tmp_path):
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    code, _, err = run_cli(["report", results, "-o", link])
    assert code == 0, err
    assert link.is_symlink() and real.read_text().startswith("<!DOCTYPE html")
