"""Test-side helpers, written independently of ``reference`` and ``harness``.

- ``paged``: lay per-request tokens out in a shuffled page pool by hand (NaN
  everywhere else), with a block table padded by any value;
- ``dense_attention``: the attention the reference must compute, as a dense
  masked softmax built by explicit Python loops over tokens, queries and heads;
- ``run_cli``: ``harness.cli.main`` in-process, capturing stdout and stderr;
- ``under_triton_interpreter``: a script run by a fresh Python under Triton's CPU interpreter;
- ``disagreements_on_cuda``, ``disagreements_under_interpreter``: a kernel test's check script (one that
  defines ``disagreements(device, kernel)``) run on CUDA in this process, or on the CPU under the interpreter.
"""

import contextlib
import io
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
F64 = torch.float64
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


@dataclass
class Paged:
    pool: torch.Tensor            # (num_pages, page_size, h_kv, d)
    block_table: torch.Tensor     # (b, width) int32
    seqlens: torch.Tensor         # (b,) int32
    pages: list                   # pages[r]: the page ids of request r, in order


def paged(tokens: list, page_size: int, gen: torch.Generator, dtype=torch.float32, extra_pages: int = 2,
          pad_value: int = -1, extra_columns: int = 0, fill: float = math.nan) -> Paged:
    """Write request r's tokens ``tokens[r]`` ``(n_r, h_kv, d)`` into shuffled pages of a fresh pool.

    Page 0 and ``extra_pages`` more are never used; every slot no token is written
    to holds ``fill``.  Table entries past a request's last page hold ``pad_value``.
    """
    h_kv, d = tokens[0].shape[1:]
    need = [-(-t.shape[0] // page_size) for t in tokens]
    num_pages = 1 + sum(need) + extra_pages
    order = (torch.randperm(num_pages - 1, generator=gen) + 1).tolist()
    pool = torch.full((num_pages, page_size, h_kv, d), fill, dtype=torch.float32).to(dtype)
    width = max(need + [1]) + extra_columns
    table = torch.full((len(tokens), width), pad_value, dtype=torch.int32)
    pages, cursor = [], 0
    for r, toks in enumerate(tokens):
        mine = order[cursor:cursor + need[r]]
        cursor += need[r]
        pages.append(mine)
        for t in range(toks.shape[0]):
            pool[mine[t // page_size], t % page_size] = toks[t].to(dtype)
        table[r, :len(mine)] = torch.tensor(mine, dtype=torch.int32)
    seqlens = torch.tensor([t.shape[0] for t in tokens], dtype=torch.int32)
    return Paged(pool, table, seqlens, pages)


def read64(x: torch.Tensor, descale) -> torch.Tensor:
    """How a kernel reads a value: fp8 as ``value * descale``, anything else as itself."""
    if x.dtype in FP8:
        return x.to(F64) * float(descale)
    return x.to(F64)


def dense_attention(q, pool, block_table, seqlens, scale, d_v, causal=True, descale_q=None, descale_k=None):
    """Dense masked softmax, one request, head and query row at a time.

    Query row i of s_q sees key t iff ``t <= L - s_q + i`` (causal) or ``t < L``.
    Empty rows give out 0 and LSE +inf.  Returns out ``(b, s_q, h_q, d_v)`` and
    LSE ``(b, h_q, s_q)`` in float64.
    """
    b, s_q, h_q, _ = q.shape
    page_size, h_kv = pool.shape[1], pool.shape[2]
    per_kv = h_q // h_kv
    qf = read64(q, descale_q)
    out = torch.zeros(b, s_q, h_q, d_v, dtype=F64)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=F64)
    for r in range(b):
        L = int(seqlens[r])
        # the request's dense K, token by token through its block table
        K = torch.stack([read64(pool[int(block_table[r, t // page_size]), t % page_size], descale_k)
                         for t in range(L)]) if L else torch.zeros(0, h_kv, pool.shape[3], dtype=F64)
        mask = torch.zeros(s_q, L, dtype=torch.bool)
        for i in range(s_q):
            for t in range(L):
                mask[i, t] = (t <= L - s_q + i) if causal else True
        for h in range(h_q):
            Kh = K[:, h // per_kv]                      # (L, d_qk)
            S = (qf[r, :, h] @ Kh.T) * scale            # (s_q, L), the full score matrix
            for i in range(s_q):
                if not bool(mask[i].any()):
                    continue
                m = S[i][mask[i]].max()
                e = torch.where(mask[i], torch.exp(S[i] - m), torch.zeros_like(S[i]))
                z = e.sum()
                out[r, i, h] = (e / z) @ Kh[:, :d_v]
                lse[r, h, i] = m + torch.log(z)
    return out, lse


def run_cli(argv) -> tuple[int, str, str]:
    """``mla-verify ARGV`` in-process: (exit code, stdout, stderr)."""
    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def under_triton_interpreter(script: str, timeout: int = 600) -> tuple[str, str]:
    """``script``'s stdout (stripped) and stderr, run by a fresh Python under Triton's CPU interpreter
    (``TRITON_INTERPRET=1``: the flag is read when Triton loads).  Skips the test where Triton is not
    installed, or where the script says "triton does not load" (unless MLA_VERIFY_REQUIRE_TRITON_CPU)."""
    pytest.importorskip("triton", reason="Triton is not installed here (make triton-cpu installs it)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    if "triton does not load" in done.stderr and not os.environ.get("MLA_VERIFY_REQUIRE_TRITON_CPU"):
        pytest.skip(f"triton does not load here: {done.stderr.strip().splitlines()[-1]}")
    return done.stdout.strip(), done.stderr


def disagreements_on_cuda(check: str, kernel) -> list:
    """What ``disagreements("cuda", kernel)``, defined by the script ``check``, finds, in this process."""
    space = {}
    exec(check, space)
    return space["disagreements"]("cuda", kernel)


def disagreements_under_interpreter(check: str, kernel_expression: str) -> tuple[str, str]:
    """``under_triton_interpreter`` of the script ``check`` and ``kernel = kernel_expression`` (a name
    ``check`` imports), printing ``disagreements("cpu", kernel)`` or ``equal``.  Skips on a CUDA box: the
    compiled kernel's test runs there instead."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the compiled kernel's test runs instead")
    return under_triton_interpreter(check + textwrap.dedent(f"""
        kernel = {kernel_expression}
        assert kernel is not None, "triton does not load"
        print(disagreements("cpu", kernel) or "equal")
    """))


def heads_keyed_suite(seed: int, drafts: int, heads: list[int]) -> str:
    """A suite file of small verify cases, case g/i with ``heads[i]`` heads, for a plug-in that misbehaves on
    one case by its head count (a crash, a hang, a write to stderr)."""
    return textwrap.dedent(f'''
        [suite]
        seed = {seed}
        [defaults]
        batch_size = 2
        heads = 4
        d_qk = 40
        d_v = 32
        page_size = 8
        seqlen = "uniform:1:40"
        [[group]]
        name = "g"
        mode = "verify"
        draft_tokens = {drafts}
        heads = {heads}
    ''')


def serve_here(messages) -> list:
    """``worker_process.serve`` run in this process on ``messages`` sent ahead; what it answered, in order
    (its SIGINT handler put back after)."""
    import multiprocessing as mp
    import signal
    from types import SimpleNamespace

    from harness.running import worker_process
    parent, child = mp.Pipe()
    for message in messages:
        parent.send(message)
    handler = signal.getsignal(signal.SIGINT)
    try:
        worker_process.serve(child, SimpleNamespace(value=-1))
    finally:
        signal.signal(signal.SIGINT, handler)
    answers = []
    while parent.poll():
        answers.append(parent.recv())
    return answers


# A kernel whose first call starts a stand-in compiler (``sleep``, which inherits the worker's ignored SIGINT,
# as a JIT's ptxas or nvcc does), writes its pid to $CHILD_PID_FILE, and waits for it as a call waits for its build
BUILDING_PLUGIN = textwrap.dedent('''
    import os, subprocess, time
    from harness.backends.torch_backend import TorchBackend

    class Building(TorchBackend):
        name = "building"

        def run(self, inputs):
            child = subprocess.Popen(["sleep", "300"])
            with open(os.environ["CHILD_PID_FILE"], "w") as f:
                f.write(str(child.pid))
            time.sleep(300)
''')


def process_gone(pid: int, wait_s: float = 10.0) -> bool:
    """Whether process ``pid`` is gone (or only its zombie is left) within ``wait_s``."""
    import time
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
