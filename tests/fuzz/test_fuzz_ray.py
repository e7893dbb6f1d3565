"""``mla-verify fuzz --ray``: a campaign on a local Ray cluster of two CPUs (started here, in this process)
gives the single-machine campaign's rows, for the same seed and case count.

- the clean torch backend: the same rows, written in the campaign's case order;
- a mutant, with one actor killed while it holds a round: that round runs again on another actor and its
  rows say so (``rerun_after``); still the same rows, and the same shrunk case in the corpus;
- rows are compared as ``scripts/gpu/same_rows.py`` compares them, and where they ran is left out too
  (``placement``, ``rerun_after``: docs/fuzz.md);
- bad input on a cluster, and Ray missing: one line, exit 2; ``fuzz`` without ``--ray`` never imports Ray.

Skips without Ray (``pip install 'mla-verify[ray]'``), except where ``MLA_VERIFY_REQUIRE_RAY=1`` (CI installs
the extra): a skip there would hide the lane.
"""

import importlib.util
import os
import signal
import subprocess
import sys

import pytest
import torch
from helpers import REPO, run_cli

from harness.errors import InputError
from harness.fuzz import campaign, ray_cluster
from harness.recording.results import read_rows

HAVE_RAY = importlib.util.find_spec("ray") is not None
if not HAVE_RAY and os.environ.get("MLA_VERIFY_REQUIRE_RAY") == "1":
    raise RuntimeError("MLA_VERIFY_REQUIRE_RAY=1 but ray is not installed: pip install 'mla-verify[ray]'")
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed: pip install 'mla-verify[ray]'")

# what same_rows.py leaves out (timings, the tree's commit), and where a row ran
LEFT_OUT = {"wall_s", "kernel_ms", "reference_ms", "phase_ms", "finished_at", "commit", "placement", "rerun_after"}
ROUND = 4           # cases per round here, so that a few cases make several rounds for the two actors
SMALL = ["--device", "cpu", "--max-context", "64", "--max-batch", "2", "--no-progress"]


@pytest.fixture(scope="module")
def cluster():
    import ray
    sigterm = signal.getsignal(signal.SIGTERM)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    signal.signal(signal.SIGTERM, sigterm)      # ray.init's own handler, not left to the tests after these


@pytest.fixture
def small_rounds(monkeypatch):
    monkeypatch.setattr(campaign, "ROUND_CASES", ROUND)


def comparable(value):
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in LEFT_OUT}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def fuzz(tmp_path, name: str, *argv):
    out = tmp_path / f"{name}.jsonl"
    code, stdout, stderr = run_cli(["fuzz", *SMALL, "--corpus", tmp_path / f"{name}-corpus", "--out", out, *argv])
    return code, stdout + stderr, read_rows(out) if out.exists() else []


def on_one_machine(tmp_path, *argv):
    """The single-machine campaign, computing with one thread as each CPU actor does."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fuzz(tmp_path, "one", "--workers", "0", *argv)
    finally:
        torch.set_num_threads(threads)


def assert_same_rows(ray_rows: list, one_rows: list, count: int):
    assert [r["fuzz"]["index"] for r in ray_rows] == list(range(count))          # the campaign's order
    by_index = sorted(one_rows, key=lambda r: r["fuzz"]["index"])
    assert len(ray_rows) == len(by_index) == count
    for ours, theirs in zip(ray_rows, by_index):
        assert comparable(ours) == comparable(theirs), ours["case_id"]
    assert all(r["placement"]["node"] for r in ray_rows) and all("placement" not in r for r in one_rows)


@needs_ray
def test_the_torch_backend_gives_the_single_machine_rows(cluster, small_rounds, tmp_path):
    argv = ["--backend", "torch", "--cases", "10", "--seed", "3"]
    code, said, rows = fuzz(tmp_path, "ray", "--ray", "auto", "--workers", "2", *argv)
    assert code == 0, said
    assert "2 actor(s) on 1 node(s)" in said and "verdict: PASSED (exit 0)" in said
    one_code, one_said, one_rows = on_one_machine(tmp_path, *argv)
    assert one_code == 0, one_said
    assert {r["status"] for r in rows} <= {"pass", "unsupported"} and any(r["status"] == "pass" for r in rows)
    assert_same_rows(rows, one_rows, 10)
    assert "rerun_after" not in str(rows)


def kill_each_round_handed_out(monkeypatch, ray, times: int) -> list:
    """Actors.hand_out, then the actor just handed a round killed (Ray restarts it), ``times`` times in all;
    each kill (actor index, the round's case ids) in a list."""
    killed, seen = [], set()
    hand_out = ray_cluster.Actors.hand_out

    def hand_out_then_kill(self, more=None):
        hand_out(self, more)
        for index, job in list(self.running.values()):
            handed = (id(job), len(job.losses))           # this job, handed out this time
            if job.method == "run_round" and handed not in seen and len(killed) < times:
                seen.add(handed)
                killed.append((index, {c.id for c in job.args[0]}))
                ray.kill(self.handles[index], no_restart=False)     # its process dies with the round in hand

    monkeypatch.setattr(ray_cluster.Actors, "hand_out", hand_out_then_kill)
    return killed


@needs_ray
def test_a_mutant_with_an_actor_lost_mid_round_gives_the_same_rows_and_corpus(cluster, small_rounds, tmp_path,
                                                                                  monkeypatch):
    killed = kill_each_round_handed_out(monkeypatch, cluster, times=1)
    argv = ["--backend", "mutant:lse_base2", "--cases", "8", "--seed", "1"]
    code, said, rows = fuzz(tmp_path, "ray", "--ray", "auto", "--workers", "2", *argv)
    assert code == 1 and "FOUND fail: LSE over its bound on mutant:lse_base2" in said, said
    (index, lost_ids), = killed
    again = {r["case_id"] for r in rows if r.get("rerun_after", "").startswith(f"Ray actor {index} lost: ")}
    assert again == lost_ids and len(again) == ROUND
    one_code, one_said, one_rows = on_one_machine(tmp_path, *argv)
    assert one_code == 1, one_said
    assert_same_rows(rows, one_rows, 8)
    kept = {p.name: p.read_text() for p in (tmp_path / "ray-corpus").iterdir()}
    assert kept and kept == {p.name: p.read_text() for p in (tmp_path / "one-corpus").iterdir()}


@needs_ray
def test_a_round_that_loses_two_actors_is_recorded_as_crashed(cluster, small_rounds, tmp_path, monkeypatch):
    killed = kill_each_round_handed_out(monkeypatch, cluster, times=2)
    code, said, rows = fuzz(tmp_path, "ray", "--ray", "auto", "--workers", "2", "--backend", "torch",
                            "--cases", str(ROUND), "--seed", "3")
    assert code == 1 and "verdict: FAILED (exit 1)" in said, said
    assert len(killed) == 2 and killed[0][1] == killed[1][1] == {r["case_id"] for r in rows}
    for row in rows:
        assert row["status"] == "crash" and "rerun_after" not in row
        assert [p.split(" lost: ")[0] for p in row["reason"].split("; ")] == [f"Ray actor {i}" for i, _ in killed]


@needs_ray
@pytest.mark.parametrize("argv, says", [
    (["--device", "cuda"], "--device cuda: the Ray cluster has no GPU"),
    (["--workers", "0"], "--workers 0 with --ray on the CPU"),
])
def test_bad_input_on_the_cluster_is_one_line_and_exit_2(cluster, tmp_path, argv, says):
    code, stdout, stderr = run_cli(["fuzz", "--backend", "torch", "--cases", "2", "--ray", "auto",
                                    "--corpus", tmp_path / "c", "--out", tmp_path / "r.jsonl", *argv])
    assert code == 2 and stdout == "" and stderr.count("\n") == 1 and says in stderr, stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_an_address_nothing_answers_at_is_one_line_at_once():
    with pytest.raises(InputError, match=r"^--ray 127.0.0.1:1: nothing answers at 127.0.0.1:1 \("):
        ray_cluster._check_reachable("127.0.0.1:1")


def test_without_ray_it_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)        # import ray fails, as where it is not installed
    code, stdout, stderr = run_cli(["fuzz", "--backend", "torch", "--cases", "2", "--ray", "auto",
                                    "--out", tmp_path / "r.jsonl"])
    assert (code, stdout) == (2, "")
    assert stderr == "mla-verify: error: --ray needs Ray, an optional extra: pip install 'mla-verify[ray]'\n"


def test_fuzz_without_ray_never_imports_it(tmp_path):
    code = ("import sys\nfrom harness.cli import main\nimport harness.fuzz.ray_campaign, harness.fuzz.ray_actor\n"
            f"main(['fuzz', '--backend', 'torch', '--cases', '1', '--device', 'cpu', '--workers', '0', "
            f"'--no-progress', '--corpus', {str(tmp_path / 'c')!r}, '--out', {str(tmp_path / 'r.jsonl')!r}])\n"
            "print('ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0 and done.stdout.split()[-1:] == ["False"], done.stdout + done.stderr
