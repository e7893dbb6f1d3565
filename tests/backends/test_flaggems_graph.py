"""FlagGems' CUDA-graph session (harness/backends/flaggems_graph.py): its buffer filling on the CPU, the graph
scenario's path for a kernel without an LSE (a CPU stand-in for ``flash_mla`` and for the graph), and the
graph suite on the GPU where flag_gems is installed.

Expectations are built apart from the code under test: pages from the store's ``block_table``, not from
``req_to_token``; the stand-in computes attention from the table and seq lens it is handed.
"""

import dataclasses
import math

import pytest
import torch

from harness.backends.base import Feature, no_sparse_reason
from harness.backends.flaggems_graph import SEQ_LEN_FILL, FlagGemsGraphSession
from harness.backends.flaggems_mla import FlagGemsMLABackend
from harness.backends.flashmla import FlashMLABackend
from harness.backends.torch_backend import TorchBackend
from harness.building.inputs import KVStore, cache_seqlens_for, draw_normal
from harness.planning.cases import Case, case_seed, load_suite

P = 64


def stand_in_flash_mla(q, block_table, blocked_k, max_seqlen_pad, block_size, b, s_q, cache_seqlens, h_q, h_kv,
                       d, dv, causal):
    """flash_mla's arithmetic in float32 from what it is handed: one query row per request, scale 1/sqrt(d)."""
    assert causal and s_q == 1 and h_kv == 1 and q.shape == (b, s_q, h_q, d)
    pool = blocked_k.reshape(-1, d)
    out = torch.empty(b, s_q, h_q, dv, dtype=q.dtype)
    for r in range(b):
        t = torch.arange(int(cache_seqlens[r]))
        keys = pool[block_table[r, t // block_size].long() * block_size + t % block_size].float()
        scores = q[r, 0].float() @ keys.T / math.sqrt(d)
        out[r, 0] = (scores.softmax(-1) @ keys[:, :dv]).to(q.dtype)
    return out


class CPUFlagGems(FlagGemsMLABackend):
    """FlagGems' backend with the stand-in kernel; records each call's arguments."""

    def __init__(self):
        self.calls = []

    def flash_mla(self):
        def call(*args):
            self.calls.append(args)
            return stand_in_flash_mla(*args)
        return call

    def graph_session(self, max_bs, max_context_len, inputs):
        return EagerGraphSession(self, max_bs, max_context_len, inputs)


class EagerGraph:
    """``replay`` reruns the captured call on the session's buffers: what a CUDA graph does, minus the graph."""

    def __init__(self, session):
        self.session = session

    def replay(self):
        self.session.out = self.session.forward(self.session.bs)


class EagerGraphSession(FlagGemsGraphSession):
    def capture(self, bs, rows_pages):
        self.bs = bs
        self.set_batch(None, [SEQ_LEN_FILL] * bs, rows_pages)
        self.out = self.forward(bs)
        self.graph = EagerGraph(self)


def make_case(mode="decode", batch=3, seqlen="list:5,63,100", scenario="call"):
    cid = f"flaggems-graph/{mode}/{batch}/{seqlen}/{scenario}"
    return Case(id=cid, seed=case_seed(cid, 0), mode=mode, batch_size=batch, heads=4, dtype="fp16",
                draft_tokens=1, seqlen=seqlen, scenario=scenario)


def make_store(case, prefix, grow=100):
    first = cache_seqlens_for(case, prefix)
    final = [n + grow for n in first]
    tokens = draw_normal((sum(final), 1, 576), torch.Generator().manual_seed(case.seed), torch.float16)
    store = KVStore(case, final, tokens, torch.device("cpu"))
    store.write_up_to(first)
    template = store.inputs(torch.zeros(case.batch_size, 1, case.heads, 576, dtype=torch.float16), first)
    return store, template


def pages_of(store, request: int, length: int) -> torch.Tensor:
    return store.index_layout.block_table[request, :max(1, -(-length // P))].clone()


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_a_step_fills_q_seq_lens_and_table_rows_and_the_call_reads_those_buffers(mode):
    case = make_case(mode)
    store, template = make_store(case, [5, 63, 100])
    backend = CPUFlagGems()
    session = FlagGemsGraphSession(backend, 3, 400, template)
    assert session.table.shape == (3, (400 + P) // P) and int(session.table.min()) == 1   # SGLang's fill
    assert session.seq_buf.tolist() == [SEQ_LEN_FILL] * 3
    session.bs = 3
    session.table.fill_(-5)                                      # stale entries from earlier steps
    session.q_buf[2].fill_(7.0)                                  # a padding row's q from an earlier step
    prefix = [150, 64]
    drafts = 1 if mode == "verify" else 0
    rows = [pages_of(store, 0, 150 + drafts), pages_of(store, 1, 64 + drafts), pages_of(store, 0, 1 + drafts)]
    q = torch.randn(2, 1, 4, 576, generator=torch.Generator().manual_seed(2)).half()
    session.set_batch(q, torch.tensor(prefix + [SEQ_LEN_FILL], dtype=torch.int32), rows)
    assert torch.equal(session.q_buf[:2], q) and bool((session.q_buf[2] == 7.0).all())
    assert session.seq_buf.tolist() == prefix + [SEQ_LEN_FILL]
    for r, pages in enumerate(rows):
        assert session.table[r, :len(pages)].tolist() == pages.tolist(), r
        assert session.table[r, len(pages):].eq(-5).all(), r              # past the needed entries: untouched
    out, lse = session.eager_same_buffers()
    assert lse is None and out.shape == (3, 1, 4, 512)
    q_arg, table, pool, _, block_size, b, s_q, seqlens, h_q, h_kv, d, dv, causal = backend.calls[-1]
    assert q_arg.data_ptr() == session.q_buf.data_ptr() and table.data_ptr() == session.table.data_ptr()
    assert table.shape == (3, session.table.shape[1]) and table.is_contiguous()     # no copy in its .contiguous()
    assert pool is template.kv_pool and (block_size, b, s_q, h_q, h_kv, d, dv, causal) == (P, 3, 1, 4, 1, 576,
                                                                                              512, True)
    assert seqlens.tolist() == [n + drafts for n in prefix + [SEQ_LEN_FILL]]
    if mode == "decode":           # the captured call reads the buffer itself, so a replay sees each step's
        assert seqlens.data_ptr() == session.seq_buf.data_ptr()


def test_addresses_name_the_captured_buffers_and_a_metadata_refresh_leaves_them_alone():
    _, template = make_store(make_case(), [5, 63, 100])
    session = FlagGemsGraphSession(CPUFlagGems(), 3, 400, template)
    before = [t.clone() for t in (session.table, session.seq_buf, session.q_buf)]
    session.refresh_metadata(3)              # what the bench's graph step calls before each replay
    assert all(torch.equal(a, b) for a, b in zip(before, (session.table, session.seq_buf, session.q_buf)))
    assert session.addresses() == {"block_table": session.table.data_ptr(),
                                   "cache_seqlens": session.seq_buf.data_ptr(), "q": session.q_buf.data_ptr()}


# ---- the graph scenario for a kernel without an LSE (CPU stand-ins for the kernel and the graph) ----

class SeqLensOneShort(EagerGraphSession):
    """Writes every row's seq len one short: the kernel reads one key too few."""

    def set_batch(self, q_real, seq_lens_padded, rows_pages):
        super().set_batch(q_real, torch.as_tensor(seq_lens_padded) - int(q_real is not None), rows_pages)


def backend_with(session_cls):
    class Backend(CPUFlagGems):
        def graph_session(self, max_bs, max_context_len, inputs):
            return session_cls(self, max_bs, max_context_len, inputs)
    return Backend()


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_graph_steps_judge_a_kernel_without_lse_as_the_call_scenario_does(mode):
    from harness.scenarios import graph
    outcome = graph.run_steps(make_case(mode, scenario="graph"), CPUFlagGems(), "cpu")
    assert outcome.status.value == "pass", outcome.messages
    metrics = outcome.metrics
    assert "out" in metrics and "lse" not in metrics                  # no LSE check recorded, never a pass
    assert outcome.details["lse_produced"] is False
    g = metrics["graph"]
    assert g["index"] == "block table" and g["session"] == "EagerGraphSession" and g["steps"] == graph.GRAPH_STEPS >= 20
    assert g["ref_lse_worst_ratio"] is None and 0 < g["ref_out_worst_ratio"] <= 1
    assert g["engine_eager_bitwise_equal"] and g["eager_nondeterministic_steps"] == []
    assert min(g["real_batch_sizes"]) < 3                      # some steps ran with padding rows


def test_graph_steps_catch_seq_lens_written_one_short(monkeypatch):
    from harness.scenarios import graph
    monkeypatch.setattr(graph, "GRAPH_STEPS", 3)
    outcome = graph.run_steps(make_case(scenario="graph"), backend_with(SeqLensOneShort), "cpu")
    assert outcome.status.value == "fail"
    assert "graph.vs_engine_eager" in outcome.failed_checks


# ---- the scenarios' reasons ----------------------------------------------------------------------

def test_the_graph_scenario_takes_flaggems_and_names_it_among_the_graph_backends():
    from harness.scenarios import graph
    assert Feature.GRAPH in FlagGemsMLABackend.features and FlagGemsMLABackend.no_graph_session is None
    assert "flaggems" in graph.graph_backends()


def test_the_sparse_reason_names_the_backend_that_runs_the_sparse_sibling():
    generic = "has no sparse entry point (run_sparse): mla-verify calls it for dense paged MLA only"
    assert no_sparse_reason(FlagGemsMLABackend()) == (f"flaggems {generic}; its sparse kernel runs as the "
                                                      "backend flaggems-sparse")
    assert no_sparse_reason(FlashMLABackend()).endswith("; its sparse kernel runs as the backend flashmla-sparse")


    class DenseOnly(TorchBackend):
        """A plug-in that overrides the dense call alone: no sparse entry point, no sibling."""
        name, capabilities = "dense-only", dataclasses.replace(TorchBackend.capabilities, sparse=None)
        features = frozenset({Feature.DENSE})

        def run(self, inputs):
            return super().run(inputs)
    assert no_sparse_reason(DenseOnly()) == f"dense-only {generic}"  # no sibling: the generic reason


def test_the_named_sparse_backends_exist_and_have_run_sparse():
    from harness.backends import BUILTIN
    for backend in (FlagGemsMLABackend, FlashMLABackend):
        sibling = BUILTIN[backend.sparse_backend]()
        assert sibling.supports(Feature.SPARSE), backend.sparse_backend


# ---- on the GPU ---------------------------------------------------------------------------------

def test_the_graph_suite_runs_flaggems_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (CUDA-graph capture); none here")
    backend = FlagGemsMLABackend()
    if not backend.available():
        pytest.skip(f"flaggems: {backend.availability()}")
    from harness.running.runner import run_case
    cases = [c for c in load_suite("graph").cases if backend.unsupported_reason(c, "cuda") is None]
    assert len(cases) == 4 and {c.group for c in cases} == {"decode"}
    rows = [run_case(c, backend, "flaggems", "cuda") for c in cases]
    assert all(r["status"] in ("pass", "fail") for r in rows), [(r["case_id"], r.get("reason")) for r in rows]
    assert all(r["metrics"]["graph"]["steps"] >= 20 and "lse" not in r["metrics"] for r in rows)
