"""``run --gpus``: worker sets pinned one per GPU, a memory gate per GPU, a lost GPU's cases run again
elsewhere.  No GPU here: ``MLA_VERIFY_FAKE_GPUS`` makes ``harness.running.gpus`` report pretend ones,
the workers are pinned to them by ``CUDA_VISIBLE_DEVICES`` all the same, and the kernels run on the CPU."""

import json
import re
import textwrap

import pytest
from fakes import FakeWorker
from helpers import heads_keyed_suite, run_cli

from harness.errors import InputError
from harness.running import gpus, placement
from harness.running.isolation import MemoryGate, hand_out

SMI = textwrap.dedent("""\
    GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)
    GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-66666666-2222-3333-4444-555555555555)
      MIG 3g.40gb     Device  0: (UUID: MIG-77777777-2222-3333-4444-555555555555)
    GPU 2: NVIDIA H200 (UUID: GPU-88888888-2222-3333-4444-555555555555)
""")


def test_nvidia_smi_list_is_parsed_without_its_mig_lines():
    found = gpus.parse_smi_list(SMI)
    assert [(g.index, g.name) for g in found] == [(0, "NVIDIA H200"), (1, "NVIDIA H100 80GB HBM3"), (2, "NVIDIA H200")]
    assert found[1].uuid == "GPU-66666666-2222-3333-4444-555555555555" and found[1].pin == found[1].uuid


def test_cuda_visible_devices_narrows_what_is_found():
    found = gpus.parse_smi_list(SMI)
    assert gpus.visible(found, None) == found
    assert [g.index for g in gpus.visible(found, "2,0")] == [2, 0]
    assert [g.index for g in gpus.visible(found, "GPU-6666")] == [1]          # a UUID prefix, as CUDA takes
    assert [g.index for g in gpus.visible(found, "1,7,2")] == [1]             # CUDA stops at an invalid index
    assert gpus.visible(found, "MIG-77777777-2222-3333-4444-555555555555") is None
    assert gpus.visible(found, "") == []


def test_gpus_flag_selects_by_index_and_refuses_what_is_not_there():
    found = gpus.parse_smi_list(SMI)
    assert gpus.select("all", found) == found and gpus.select(None, found) == found
    assert [g.index for g in gpus.select("2,0", found)] == [2, 0]
    for spec, message in (("0,x", "expected 'all' or GPU indices"), ("1,1", "GPU 1 is named twice"),
                          ("5", "there is no GPU 5 here (GPUs found: 0, 1, 2)"), ("-1", "expected 'all'")):
        with pytest.raises(InputError, match=re.escape(f"--gpus {spec}: {message}")):
            gpus.select(spec, found)


def test_worker_sets_pin_each_gpu_and_leave_a_one_gpu_box_as_it_was():
    found = gpus.parse_smi_list(SMI)
    sets = gpus.worker_sets(gpus.select("0,2", found), found)
    assert [pin for pin, _ in sets] == [found[0].uuid, found[2].uuid]
    assert sets[1][1] == {"gpu": 2, "name": "NVIDIA H200", "uuid": found[2].uuid}
    one = found[:1]
    assert gpus.worker_sets(one, one) == [(None, one[0].placement())]        # unpinned, its rows still say which
    assert gpus.worker_sets([], []) == [(None, None)]


def test_the_fake_gpu_hook_is_read_only_by_gpus(monkeypatch):
    monkeypatch.setenv(gpus.FAKE_ENV, "3")
    assert [(g.index, g.pin, g.fake) for g in gpus.discover()] == [(0, "0", True), (1, "1", True), (2, "2", True)]
    assert [pin for pin, _ in gpus.plan("0,2", "cpu")[0]] == ["0", "2"]
    monkeypatch.setenv(gpus.FAKE_ENV, "two")
    with pytest.raises(InputError, match="MLA_VERIFY_FAKE_GPUS='two'"):
        gpus.discover()
    monkeypatch.delenv(gpus.FAKE_ENV)
    assert gpus.plan("0,2", "cpu") == ([(None, None)], "--gpus 0,2: not used, the run is on the CPU")


def test_default_workers_share_the_cores_out_over_the_gpus():
    assert gpus.workers_per_gpu(128, 8, 4, 4) == 4 and gpus.workers_per_gpu(16, 8, 4, 4) == 1
    assert gpus.workers_per_gpu(16, 1, 4, 4) == 4 and gpus.workers_per_gpu(2, 1, 4, 4) == 1


def test_the_memory_gate_counts_only_the_workers_of_the_same_gpu():
    a = placement.WorkerSet("0", {"gpu": 0}, memory=MemoryGate(cost=sum, budget=10))
    b = placement.WorkerSet("1", {"gpu": 1}, memory=MemoryGate(cost=sum, budget=10))
    busy_a, idle_a, idle_b = FakeWorker(a, chunk=[8], holds=8), FakeWorker(a), FakeWorker(b)
    pool, todo = [busy_a, idle_a, idle_b], [[7], [7]]
    hand_out(todo, pool, b.memory, b, [a, b])
    assert idle_b.told == [[7]]                       # GPU 0's 8 bytes do not count on GPU 1
    hand_out(todo, pool, a.memory, a, [a, b])
    assert idle_a.told == [] and todo == [[7]]        # on GPU 0 they do: 8 + 7 > 10, it waits


def test_a_rerun_avoids_the_gpu_it_died_on_unless_no_other_is_left():
    a, b = placement.WorkerSet("0", {"gpu": 0}), placement.WorkerSet("1", {"gpu": 1})
    sets = [a, b]
    assert placement.moves_elsewhere(["case"], a, sets)
    reruns = placement.move(["c1", "c2"], a, "worker killed by signal SIGKILL")
    assert [list(r) for r in reruns] == [["c1"], ["c2"]] and a.deaths == 1
    assert reruns[0].after == "gpu 0 lost: worker killed by signal SIGKILL"
    assert not placement.may_run(reruns[0], a, sets) and placement.may_run(reruns[0], b, sets)
    assert not placement.moves_elsewhere(reruns[0], b, sets)      # a second death is charged to the case
    placement.forgive(reruns[0], b)
    assert a.deaths == 0 and b.deaths == 0
    gate = MemoryGate()
    assert gate.pick([reruns[0], ["other"]], 0, allowed=lambda c: placement.may_run(c, a, sets)) == 1
    b.lost = "gone"
    assert placement.may_run(reruns[0], a, sets)                    # nowhere else to go
    assert not placement.moves_elsewhere(["case"], a, sets)


def test_a_rerun_with_no_worker_that_may_take_it_gets_one():
    """After deaths the only workers left may be on the GPU a rerun must avoid: one starts elsewhere."""
    a, b, c = (placement.WorkerSet(str(i), {"gpu": i}) for i in range(3))
    sets = [a, b, c]
    rerun = placement.move(["x"], a, "worker killed by signal SIGKILL")[0]
    assert placement.uncovered([["y"]], sets, [FakeWorker(a)]) == []
    assert placement.uncovered([["y"], rerun], sets, [FakeWorker(a), FakeWorker(a), FakeWorker(c)]) == []
    assert placement.uncovered([["y"], rerun], sets, [FakeWorker(a), FakeWorker(b)]) == []
    assert placement.uncovered([rerun], sets, [FakeWorker(a), FakeWorker(b, chunk=["z"])]) == []
    assert placement.uncovered([rerun], sets, [FakeWorker(a)]) == [b]        # b and c have none: the first
    c.lost = b.lost = "gone"
    assert placement.uncovered([rerun], sets, [FakeWorker(a)]) == []         # a is all there is: it may


def test_a_gpu_is_out_of_the_run_after_deaths_in_a_row(capsys):
    a, b = placement.WorkerSet("0", {"gpu": 0}), placement.WorkerSet("1", {"gpu": 1})
    placement.move(["c"], a, "x")
    assert not placement.check_lost(a, [a, b], "x")
    placement.move(["c"], a, "y")
    assert placement.check_lost(a, [a, b], "y") and a.lost
    assert "gpu 0 lost: 2 workers died on it in a row (last: y)" in capsys.readouterr().err
    pool = [FakeWorker(b), FakeWorker(b)]
    assert placement.refill(a, [a, b], pool) is b and placement.refill(b, [a, b], pool) is b
    placement.move(["c"], b, "z")
    placement.move(["c"], b, "z")
    assert not placement.check_lost(b, [a, b], "z")                 # the last GPU stays


SUITE = heads_keyed_suite(seed=5, drafts=3, heads=[4, 5, 6, 7, 8, 9, 10, 11])

# Every call notes the GPU its process sees.  A call on BAD_GPU kills its process; a process on any other
# waits, on its first call, until every GPU named in WAIT_FOR has started a case, so each of them gets one
# whatever the order the workers came up in.  A call on 5 heads kills its process on CRASH_EVERYWHERE.
PLUGIN = textwrap.dedent('''
    import json, os, signal, time
    from pathlib import Path
    from harness.backends.torch_backend import TorchBackend

    NOTES = Path(os.environ["NOTES_DIR"])
    waited = False

    class Pinned(TorchBackend):
        name = "pinned"

        def run(self, inputs):
            global waited
            gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
            (NOTES / f"started-{gpu}").touch()
            with open(NOTES / f"calls-{os.getpid()}.jsonl", "a") as f:
                f.write(json.dumps({"gpu": gpu, "heads": inputs.q.shape[2]}) + "\\n")
            if gpu == os.environ.get("BAD_GPU") or (inputs.q.shape[2] == 5 and os.environ.get("CRASH_EVERYWHERE")):
                os.kill(os.getpid(), signal.SIGKILL)
            deadline = time.monotonic() + 120
            while not waited and time.monotonic() < deadline and not all(
                    (NOTES / f"started-{g}").exists() for g in os.environ.get("WAIT_FOR", "").split(",") if g):
                time.sleep(0.05)
            waited = True
            return super().run(inputs)
''')


def _fake_run(tmp_path, monkeypatch, fake: int, extra_env: dict, *flags):
    notes = tmp_path / "notes"
    notes.mkdir()
    (tmp_path / "s.toml").write_text(SUITE)
    (tmp_path / "pinned.py").write_text(PLUGIN)
    monkeypatch.setenv(gpus.FAKE_ENV, str(fake))
    monkeypatch.setenv("NOTES_DIR", str(notes))
    for key, value in extra_env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "r.jsonl"
    # --device cpu: the workers are pinned to pretend GPUs, which hide a real one on a GPU box
    code, _, err = run_cli(["run", "--suite", str(tmp_path / "s.toml"), "--backend", f"{tmp_path / 'pinned.py'}:Pinned",
                            "--out", str(out), "--chunk", "1", "--no-progress", "--timeout", "120", "--device", "cpu",
                            *flags])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    calls = {p.name: [json.loads(line) for line in p.read_text().splitlines()] for p in notes.glob("calls-*")}
    return code, err, rows, calls


def test_worker_sets_are_pinned_one_per_gpu_and_rows_say_which(tmp_path, monkeypatch):
    code, err, rows, calls = _fake_run(tmp_path, monkeypatch, 3, {"WAIT_FOR": "0,1,2"}, "--workers", "1")
    assert code == 0, err
    assert len(rows) == 8 and {r["status"] for r in rows} == {"pass"}
    for process in calls.values():                       # each worker saw one GPU, all its life
        assert len({c["gpu"] for c in process}) == 1
    assert {c["gpu"] for process in calls.values() for c in process} == {"0", "1", "2"}
    seen_on = {c["heads"]: c["gpu"] for process in calls.values() for c in process}
    for row in rows:                                     # the row names the GPU its case ran on
        assert row["placement"] == {"gpu": int(seen_on[row["heads"]]), "name": "Fake GPU",
                                    "uuid": f"GPU-fake-{seen_on[row['heads']]}"}
        assert "rerun_after" not in row


def test_a_lost_gpus_cases_run_again_on_another_and_say_so(tmp_path, monkeypatch):
    code, err, rows, calls = _fake_run(tmp_path, monkeypatch, 3, {"BAD_GPU": "2", "WAIT_FOR": "2"}, "--workers", "1")
    assert code == 0, err
    assert len(rows) == 8 and {r["status"] for r in rows} == {"pass"}     # the GPU's deaths cost no case
    assert {r["placement"]["gpu"] for r in rows} <= {0, 1}
    died_on_2 = {c["heads"] for name, process in calls.items() for c in process if c["gpu"] == "2"}
    assert died_on_2                                     # GPU 2 had cases (its workers waited for), and lost them
    moved = {r["heads"]: r["rerun_after"] for r in rows if "rerun_after" in r}
    assert set(moved) == died_on_2
    assert set(moved.values()) == {"gpu 2 lost: worker killed by signal SIGKILL"}


def test_a_case_that_kills_its_worker_on_two_gpus_is_the_kernels_crash(tmp_path, monkeypatch):
    code, err, rows, _ = _fake_run(tmp_path, monkeypatch, 2, {"CRASH_EVERYWHERE": "1"}, "--workers", "1")
    assert code == 1, err
    by_heads = {r["heads"]: r for r in rows}
    assert len(rows) == 8 and by_heads[5]["status"] == "crash" and "SIGKILL" in by_heads[5]["reason"]
    assert by_heads[5]["rerun_after"].startswith("gpu ")
    first, second = int(by_heads[5]["rerun_after"].split()[1]), by_heads[5]["placement"]["gpu"]
    assert first != second                               # charged only after it died on a second GPU
    assert {r["status"] for h, r in by_heads.items() if h != 5} == {"pass"}
    assert "lost" not in err                             # the kernel's crash takes no GPU out of the run


def test_gpus_on_the_cpu_is_not_used_and_a_bad_value_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(gpus.FAKE_ENV, raising=False)
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0",
                            "--gpus", "0,3", "--device", "cpu", "--workers", "0", "--out", str(out)])
    assert code == 0 and "mla-verify: --gpus 0,3: not used, the run is on the CPU" in err
    assert "placement" not in json.loads(out.read_text())
    monkeypatch.setenv(gpus.FAKE_ENV, "2")
    for flag, message in (("5", "--gpus 5: there is no GPU 5 here (GPUs found: 0, 1)"),
                          ("0,zero", "--gpus 0,zero: expected 'all' or GPU indices such as 0,2,5, got 'zero'")):
        code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--gpus", flag,
                                "--device", "cpu", "--out", str(tmp_path / "bad.jsonl")])
        assert code == 2 and err.strip() == f"mla-verify: error: {message}", err


@pytest.mark.parametrize("flag, message", [
    ("banana", "--gpus banana: expected 'all' or GPU indices such as 0,2,5, got 'banana'"),
    ("0,,1", "--gpus 0,,1: expected 'all' or GPU indices such as 0,2,5, got ''"),
    ("1,1", "--gpus 1,1: GPU 1 is named twice"),
])
def test_a_bad_gpus_value_is_bad_input_on_the_cpu_too(tmp_path, monkeypatch, flag, message):
    """No GPU to check the indices against, but the form is checked: a typo in a CI job fails there too."""
    monkeypatch.delenv(gpus.FAKE_ENV, raising=False)
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0",
                            "--gpus", flag, "--device", "cpu", "--workers", "0", "--out", str(tmp_path / "r.jsonl")])
    assert code == 2 and err.strip() == f"mla-verify: error: {message}", err
    assert not (tmp_path / "r.jsonl").exists()


def test_gpus_all_asked_for_on_the_cpu_notes_itself(tmp_path, monkeypatch):
    monkeypatch.delenv(gpus.FAKE_ENV, raising=False)
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0",
                            "--gpus", "all", "--device", "cpu", "--workers", "0", "--out", str(tmp_path / "r.jsonl")])
    assert code == 0 and "mla-verify: --gpus all: not used, the run is on the CPU" in err.splitlines(), err
    code, _, err = run_cli(["run", "--suite", "smoke", "--backend", "torch", "--case", "smoke/decode-bf16/0",
                            "--device", "cpu", "--workers", "0", "--out", str(tmp_path / "s.jsonl")])
    assert code == 0 and "--gpus" not in err, "not asked for: nothing to say"


@pytest.fixture
def fixed_commit(monkeypatch):
    """One commit for this process's rows and its workers': a commit made meanwhile (another checkout's
    work) would otherwise set the rows apart by ``env.commit``."""
    from harness import environment
    monkeypatch.setenv("MLA_VERIFY_COMMIT", "fixed-for-this-test")
    environment.describe.cache_clear()
    yield
    environment.describe.cache_clear()


def test_rows_are_the_same_on_any_number_of_gpus_placement_aside(tmp_path, fixed_commit):
    """The mixed suite of test_parallel_runs, failing rows included, in this process and spread over three
    pretend GPUs' worker sets: the rows differ only in timings and ``placement``."""
    import torch
    from test_parallel_runs import TIMINGS, suite_cases

    from harness.recording.results import ResultsWriter, read_rows
    from harness.running.backend_loader import load_backend
    from harness.running.runner import run_cases

    cases = suite_cases(tmp_path, 4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)           # as test_parallel_runs: the CPU BLAS's threading, not the harness
    try:
        found = []
        for name, sets, workers in (("alone", None, 0),
                                    ("three", [placement.WorkerSet(str(i), {"gpu": i}) for i in range(3)], 1)):
            path = tmp_path / f"{name}.jsonl"
            with ResultsWriter(path) as writer:
                run_cases(cases, load_backend("mutant:read_past_seqlen"), "mutant:read_past_seqlen", "cpu", writer,
                          progress=False, workers=workers, chunk_cases=3, sets=sets)
            found.append({r["case_id"]: r for r in read_rows(path)})
    finally:
        torch.set_num_threads(threads)
    alone, three = found
    assert {r["placement"]["gpu"] for r in three.values()} <= {0, 1, 2}     # which ones: as they freed up
    assert "fail" in {r["status"] for r in alone.values()}
    # and the environment's GPU: on a GPU box a worker pinned to pretend GPU 1 or 2 sees none, this process one
    drop = set(TIMINGS) | {"placement"}
    for row in [*alone.values(), *three.values()]:
        row["env"] = {k: v for k, v in row["env"].items() if k not in ("gpu", "driver")}
    for case_id, row in alone.items():
        assert {k: v for k, v in three[case_id].items() if k not in drop} == \
               {k: v for k, v in row.items() if k not in drop}, case_id
