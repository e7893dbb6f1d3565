"""The results file: one writer at a time, and resume ends it cleanly without losing a whole row.

The refusals themselves (a second writer, a line that is not a row, a full disk) are in the bad-input
matrix, tests/commands/test_bad_input.py; these are the runs that go on.
"""

import json
import textwrap

from harness.cli import main
from harness.planning.cases import load_suite
from harness.recording.results import read_rows

SMOKE_IDS = sorted(c.id for c in load_suite("smoke").cases)


def run(capsys, *argv):
    code = main([str(a) for a in argv] + ["--device", "cpu", "--workers", "0", "--no-progress"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    return code, out, err


def test_two_runs_on_one_file_at_once(tmp_path, capsys):
    # as found: two runs appended to one --out, both exited 0, 105 rows for 107 cases and 2 torn fragments.
    # The first run's kernel starts a second run on the same file while the first is writing it.
    out, second = tmp_path / "r.jsonl", tmp_path / "second"
    plugin = tmp_path / "racer.py"
    plugin.write_text(textwrap.dedent(f"""
        import subprocess, sys
        from pathlib import Path
        from harness.backends.torch_backend import TorchBackend

        class Racer(TorchBackend):
            name = "racer"

            def run(self, inputs):
                done = Path({str(second)!r})
                if not done.exists():
                    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--suite", "smoke",
                                           "--backend", "torch", "--out", {str(out)!r}, "--device", "cpu",
                                           "--workers", "0", "--no-progress"], capture_output=True, text=True)
                    done.write_text(f"{{proc.returncode}}\\n{{proc.stderr}}")
                return super().run(inputs)
    """))
    code, out_text, _ = run(capsys, "run", "--suite", "smoke", "--backend", f"{plugin}:Racer", "--out", out)
    assert code == 0 and "verdict: PASSED" in out_text
    returncode, stderr = second.read_text().split("\n", 1)
    assert returncode == "2", stderr
    assert stderr.strip().splitlines()[-1] == (f"mla-verify: error: {out} is being written by another "
                                               f"mla-verify run; wait for it to finish or write to another file")
    assert "Traceback" not in stderr
    rows = read_rows(out)          # every line a whole row: nothing torn, nothing from the second run
    assert sorted(r["case_id"] for r in rows) == SMOKE_IDS and {r["backend"] for r in rows} == {"racer"}


def test_resume_keeps_a_whole_last_row_that_lacks_its_newline(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    assert run(capsys, "run", "--suite", "smoke", "--backend", "torch", "--out", path)[0] == 0
    text = path.read_text()
    path.write_text(text.rstrip("\n"))              # whole, but unterminated: it was a torn tail before
    code, out, err = run(capsys, "run", "--suite", "smoke", "--backend", "torch", "--resume", path)
    assert code == 0 and "0 case(s) run" in out and "warning" not in err
    assert path.read_text() == text, "the row was dropped, or the newline not put back"


def test_resume_drops_a_torn_last_line_only_and_runs_that_case_again(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    assert run(capsys, "run", "--suite", "smoke", "--backend", "torch", "--out", path)[0] == 0
    lines = path.read_text().splitlines(keepends=True)
    torn = json.loads(lines[-1])["case_id"]
    path.write_text("".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])
    code, out, err = run(capsys, "run", "--suite", "smoke", "--backend", "torch", "--resume", path)
    assert code == 0 and "1 case(s) from smoke" in err and torn in err
    assert path.read_text().startswith("".join(lines[:-1]))      # every whole row kept, byte for byte
    assert sorted(r["case_id"] for r in read_rows(path)) == SMOKE_IDS
