"""CPU workers share the cores: threads per worker, workers per core, and OpenMP told not to spin."""

import os
import subprocess
import sys

import pytest
from helpers import REPO

from harness.commands.run_start import spares_wanted
from harness.cores import cpu_threads, cpu_workers, usable_cores
from harness.running.worker_process import worker_job


@pytest.mark.parametrize("parent, workers, cores, threads", [
    (2, 1, 2, 2),          # one worker: the parent's count, so its rows' last bits match a run in-process
    (2, 2, 2, 1),          # two on two cores: one thread each, not two
    (16, 3, 16, 5),        # the share of the cores, rounded down
    (4, 2, 64, 4),         # never more than the parent's count
    (8, 64, 2, 1),         # always at least one
])
def test_workers_times_threads_stays_within_the_cores(parent, workers, cores, threads):
    assert cpu_threads(parent, workers, cores) == threads
    assert workers * threads <= max(cores, workers)


def test_a_cpu_workers_job_carries_its_share_of_the_cores():
    import torch
    parent = torch.get_num_threads()
    cores = usable_cores()
    assert worker_job("torch", "cpu", None, workers=1)[2] == min(parent, cores)
    assert worker_job("torch", "cpu", None, workers=cores)[2] == 1
    assert worker_job("torch", "cuda", None, workers=1)[2] == 1


def test_cpu_workers_beyond_the_cores_are_cut_with_one_note():
    assert cpu_workers(2, 2) == (2, None)
    workers, note = cpu_workers(64, 2)
    assert workers == 2 and "--workers 64" in note and "2 core(s)" in note
    assert spares_wanted(64, "cpu") == min(64, usable_cores())     # no 64 spares importing torch at once
    assert spares_wanted(64, "cuda") == 64                         # a GPU's workers wait on the device


def test_run_says_once_that_it_cut_the_workers(tmp_path):
    """On the CPU, where the workers share the cores (on a GPU they wait on the device, and are not cut)."""
    out = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--suite", "smoke", "--backend", "torch",
                           "--case", "smoke/decode-bf16/0", "--workers", str(usable_cores() + 62), "--out", str(out),
                           "--device", "cpu", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "--workers" in line]
    assert len(notes) == 1 and f"running {usable_cores()} worker process(es)" in notes[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_cli_and_its_workers_have_openmp_wait_passively():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = ("import os, sys; from harness import cli; sys.argv = ['mla-verify', 'list', '--suite', 'smoke'];"
            "cli.main(); print(os.environ.get('OMP_WAIT_POLICY'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.stdout.splitlines()[-1] == "PASSIVE", proc.stderr
    env["OMP_WAIT_POLICY"] = "ACTIVE"                # the user's own setting is kept
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.stdout.splitlines()[-1] == "ACTIVE", proc.stderr
