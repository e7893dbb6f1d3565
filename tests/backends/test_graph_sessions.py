"""The CUDA-graph sessions' host-side buffer filling (CPU), and the sessions on the GPU where there is one.

Each expectation is built independently of the code under test: token slots from the requests'
page lists (``block_table`` page ``t // P``, offset ``t % P``), not from ``req_to_token``.
"""

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # Triton's CPU interpreter, read when the kernels are defined

from harness.backends import builtins_supporting
from harness.backends.base import Feature
from harness.backends.csr_graph import (
    SEQ_LEN_FILL,
    TokenGraphSession,
    check_token_stream,
    draft_slots,
    padded_lengths,
    padded_rows,
    token_stream,
)
from harness.backends.flashinfer_graph import FlashInferGraphSession, fast_plan, host_plan_arrays
from harness.backends.sglang_triton import SGLangTritonBackend
from harness.backends.triton_graph import TritonGraphSession, active_splits, merged_lse
from harness.building.inputs import KVStore, cache_seqlens_for, draw_normal
from harness.errors import InputError
from harness.planning.cases import Case, case_seed, load_suite

P = 64


def make_case(mode="decode", batch=4, seqlen="list:5,130,64,200", drafts=1, heads=4):
    cid = f"graph-fill/{mode}/{batch}/{seqlen}"
    return Case(id=cid, seed=case_seed(cid, 0), mode=mode, batch_size=batch, heads=heads, draft_tokens=drafts,
                seqlen=seqlen, dtype="fp16")


def make_store(case, prefix, grow=100):
    """A store as the graph scenario builds it: pages for the final lengths, the first lengths written."""
    first = cache_seqlens_for(case, prefix)
    final = [n + grow for n in first]
    tokens = draw_normal((sum(final), case.kv_heads, case.d_qk), torch.Generator().manual_seed(case.seed),
                         torch.float16)
    store = KVStore(case, final, tokens, torch.device("cpu"))
    store.write_up_to(first)
    template = store.inputs(torch.zeros(case.batch_size, case.s_q, case.heads, case.d_qk, dtype=torch.float16),
                            first)
    return store, template


def slots_from_pages(store, request: int, length: int) -> list[int]:
    """Request ``request``'s first ``length`` token slots, from its page list."""
    table = store.index_layout.block_table
    return [int(table[request, t // P]) * P + t % P for t in range(length)]


def expected_stream(store, requests: list[int], lengths: list[int]):
    """The stream for rows of these requests (-1: a padding row, whose request row is req_to_token row 0)."""
    indptr, slots = [0], []
    for r, n in zip(requests, lengths):
        if r < 0:
            slots += [int(v) for v in store.index_layout.req_to_token[0, :n]]
        else:
            slots += slots_from_pages(store, r, n)
        indptr.append(len(slots))
    return indptr, slots


# ---- shared fill logic ----------------------------------------------------------------------------

def test_padding_rows_get_row_zero_and_the_fill_value():
    assert padded_rows(torch.tensor([7, 3], dtype=torch.int32), 5).tolist() == [7, 3, 0, 0, 0]
    assert padded_lengths([10, 20], 4) == [10, 20, SEQ_LEN_FILL, SEQ_LEN_FILL]


def test_token_stream_matches_the_page_lists():
    case = make_case()
    store, template = make_store(case, [5, 130, 64, 200])
    lengths = [5, 130, 64, 200]
    indptr, indices = token_stream(template.req_to_token, template.req_pool_indices, torch.tensor(lengths))
    want_indptr, want_slots = expected_stream(store, range(4), lengths)
    assert indptr.dtype == torch.int32 and indptr.tolist() == want_indptr
    assert indices.tolist() == want_slots


def test_draft_slots_are_the_positions_after_the_prefix():
    case = make_case()
    store, template = make_store(case, [5, 130, 64, 200])
    got = draft_slots(template.req_to_token, template.req_pool_indices[:2], torch.tensor([5, 130]), 3)
    want = slots_from_pages(store, 0, 8)[5:8] + slots_from_pages(store, 1, 133)[130:133]
    assert got.tolist() == want


def test_the_gate_refuses_a_stream_the_kernel_must_not_read():
    indptr = torch.tensor([0, 2, 5], dtype=torch.int32)
    good = torch.tensor([0, 1, 64, 65, 66, -1, 10**9])       # the tail past 5 is never read
    check_token_stream(indptr, good, [2, 3], num_slots=128)
    with pytest.raises(InputError, match="slot 200"):
        check_token_stream(indptr, torch.tensor([0, 1, 64, 200, 66]), [2, 3], num_slots=128)
    with pytest.raises(InputError, match="request 0.*slot -3"):
        check_token_stream(indptr, torch.tensor([-3, 1, 64, 65, 66]), [2, 3], num_slots=128)
    with pytest.raises(InputError, match="lengths"):
        check_token_stream(indptr, good, [2, 4], num_slots=128)
    with pytest.raises(InputError, match="holds 4 entries"):
        check_token_stream(indptr, good[:4], [2, 3], num_slots=128)


# ---- FlashInfer ---------------------------------------------------------------------------------

def test_flashinfer_host_plan_arrays():
    qo, kv, lens = host_plan_arrays(torch.tensor([3, 0, 70], dtype=torch.int32), 2)
    assert qo.tolist() == [0, 2, 4, 6]
    assert kv.tolist() == [0, 3, 3, 73] and lens.tolist() == [3, 0, 70]
    assert {t.dtype for t in (qo, kv, lens)} == {torch.int32} and {t.device.type for t in (qo, kv, lens)} == {"cpu"}


class FakeModule:
    def __init__(self):
        self.plans = []

    def plan(self, *args):
        self.plans.append(args)


class FakeWrapper:
    """Records what SGLang's calls hand FlashInfer's wrapper; copies CSR into its reserved buffers on plan()."""

    def __init__(self, workspace, use_cuda_graph, qo_indptr, kv_indptr, kv_indices, kv_len_arr, backend):
        assert use_cuda_graph
        self._float_workspace_buffer = workspace
        self._qo_indptr_buf, self._kv_indptr_buf = qo_indptr, kv_indptr
        self._kv_indices_buf, self._kv_len_arr_buf = kv_indices, kv_len_arr
        self._int_workspace_buffer = torch.zeros(8, dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.zeros(8, dtype=torch.uint8)
        self._cached_module = FakeModule()
        self.full_plans = []
        self.backend = backend

    def plan(self, metadata, **kwargs):
        self.full_plans.append((metadata, kwargs))
        self._qo_indptr_buf.copy_(metadata.qo_indptr)
        self._kv_indptr_buf.copy_(metadata.kv_indptr)
        self._kv_indices_buf[:len(metadata.kv_indices)].copy_(metadata.kv_indices)
        self._kv_len_arr_buf.copy_(metadata.kv_len_arr)


class FakeFlashInfer:
    BatchMLAPagedAttentionWrapper = FakeWrapper


class Csr:
    """``MLAPlanMetadata.csr``'s fields, kept as given."""

    def __init__(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr):
        self.qo_indptr, self.kv_indptr, self.kv_indices, self.kv_len_arr = qo_indptr, kv_indptr, kv_indices, kv_len_arr

    @classmethod
    def csr(cls, *fields):
        return cls(*(f.clone() for f in fields))


class FakeFlashInferBackend:
    kind = "fa3"

    def _load(self):
        return {"flashinfer": FakeFlashInfer}


def flashinfer_session(mode, monkeypatch, drafts=1):
    monkeypatch.setattr(FlashInferGraphSession, "metadata_cls", staticmethod(lambda: Csr))
    case = make_case(mode, drafts=drafts)
    store, template = make_store(case, [5, 130, 64, 200])
    return store, template, FlashInferGraphSession(FakeFlashInferBackend(), 4, 400, template)


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_flashinfer_capture_plans_the_fill_batch_then_replay_plans_each_step(mode, monkeypatch):
    drafts = 3 if mode == "verify" else 0
    store, template, session = flashinfer_session(mode, monkeypatch, drafts=max(drafts, 1))
    session.bs = 4
    session.set_batch(4, None, [SEQ_LEN_FILL] * 4)
    session.fill(capture=True)
    w = session.wrapper
    meta, kwargs = w.full_plans[0]
    assert kwargs["page_size"] == 1 and kwargs["causal"] == (mode == "verify") and kwargs["lse_mode"] == "base2"
    fill_len = SEQ_LEN_FILL + drafts
    _, pad_slots = expected_stream(store, [-1] * 4, [fill_len] * 4)
    assert meta.kv_indices.tolist() == pad_slots and meta.kv_len_arr.tolist() == [fill_len] * 4
    # decode: the replay-time fast plan runs once more at capture; verify: not until replay
    assert len(w._cached_module.plans) == (0 if mode == "verify" else 1)

    q = torch.randn(2, template.s_q, 4, 576, generator=torch.Generator().manual_seed(0)).half()
    prefix = [50, 129]
    session.prepare(q, torch.tensor(padded_lengths(prefix, 4), dtype=torch.int32))
    lengths = [n + drafts for n in prefix] + [fill_len] * 2
    want_indptr, want_slots = expected_stream(store, [0, 1, -1, -1], lengths)
    args = w._cached_module.plans[-1]
    assert args[0] is w._float_workspace_buffer and args[1] is w._int_workspace_buffer
    assert args[3].tolist() == [i * template.s_q for i in range(5)]
    assert args[4].tolist() == want_indptr and args[5].tolist() == lengths
    assert args[6:] == (4, 512, mode == "verify")
    assert w._kv_indices_buf[:len(want_slots)].tolist() == want_slots        # what run() reads
    indptr, indices = session.index_stream()
    assert indptr.tolist() == want_indptr and indices is w._kv_indices_buf
    assert torch.equal(session.q_buf[:2], q) and session.rows.tolist()[2:] == [0, 0]
    if mode == "verify":     # fast_mla_prefill_plan refreshes all four reserved buffers
        assert w._kv_indptr_buf.tolist() == want_indptr and w._kv_len_arr_buf.tolist() == lengths
    else:                    # fast_mla_decode_plan leaves them as the capture's plan wrote them
        assert w._kv_len_arr_buf.tolist() == [fill_len] * 4


def test_fast_plan_decode_form_touches_no_reserved_buffer():
    bufs = [torch.full((3,), 9, dtype=torch.int32) for _ in range(2)] + [torch.full((6,), 9, dtype=torch.int32),
                                                                         torch.full((2,), 9, dtype=torch.int32)]
    w = FakeWrapper(torch.zeros(4), True, *bufs, "fa2")
    qo, kv, lens = host_plan_arrays(torch.tensor([2, 3]), 1)
    fast_plan(w, qo, kv, lens, torch.arange(5, dtype=torch.int32), 16, 512, False, copy_buffers=False)
    assert all(int(b.min()) == 9 for b in bufs) and len(w._cached_module.plans) == 1
    fast_plan(w, qo, kv, lens, torch.arange(5, dtype=torch.int32), 16, 512, False, copy_buffers=True)
    assert bufs[1].tolist() == [0, 2, 5] and bufs[2].tolist() == [0, 1, 2, 3, 4, 9] and bufs[3].tolist() == [2, 3]


# ---- SGLang Triton --------------------------------------------------------------------------------

def brute_force_active(seq: list[int], splits: list[int], max_splits: int, block: int = 32):
    rows = []
    for n, s in zip(seq, splits):
        per = math.ceil(math.ceil(n / s) / block) * block
        rows.append([min(i * per + per, n) > i * per for i in range(max_splits)])
    return rows


def test_active_splits_follow_the_kernels_split_ranges():
    seq, splits = [0, 1, 31, 32, 33, 200, 1000, 4097], [8, 8, 2, 4, 4, 3, 16, 5]
    got = active_splits(torch.tensor(seq), torch.tensor(splits), 16)
    assert got.tolist() == brute_force_active(seq, splits, 16)


def test_merged_lse_ignores_stale_partials_of_splits_that_did_not_run():
    lse = torch.tensor([[[1.0, 2.0, 50.0, 60.0]]])             # splits 2 and 3: stale from an earlier step
    active = torch.tensor([[True, True, False, False]])
    assert torch.allclose(merged_lse(lse, active), torch.logsumexp(torch.tensor([[1.0, 2.0]]), -1))
    assert merged_lse(lse, torch.zeros_like(active)).item() == -math.inf


class CPUTriton(SGLangTritonBackend):
    device_cores = 0           # SGLang's static split count (no SM count to size against)

    def _load(self):
        return {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the fill launches SGLang's compiled "
                    "Triton helpers, which take CUDA tensors; this CPU test runs under the interpreter in CPU CI, "
                    "and test_graph_suite_runs_on_the_gpu covers the session here")
@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_triton_fill_matches_the_page_lists(mode):
    drafts = 2 if mode == "verify" else 0
    case = make_case(mode, drafts=max(drafts, 1))
    store, template = make_store(case, [5, 130, 64, 200])
    session = TritonGraphSession(CPUTriton(), 4, 400, template)
    session.bs = 4
    session.kv_indices.fill_(-7)
    q = torch.randn(3, template.s_q, 4, 576, generator=torch.Generator().manual_seed(1)).half()
    prefix = [50, 129, 10]
    store.write_up_to(cache_seqlens_for(case, prefix))          # the engine's KV writes, drafts included
    session.prepare(q, torch.tensor(padded_lengths(prefix, 4), dtype=torch.int32))
    lengths = prefix + [SEQ_LEN_FILL]           # verify: the prefix only (the drafts go in as k_extend)
    want_indptr, want_slots = expected_stream(store, [0, 1, 2, -1], lengths)
    indptr, indices = session.index_stream()
    assert indptr.tolist() == want_indptr and indices[:len(want_slots)].tolist() == want_slots
    assert int(indices[len(want_slots)]) == -7                       # the tail is left as it was
    if mode == "decode":
        assert session.num_kv_splits.tolist() == [session.max_splits] * 4 and session.max_splits == 8
        return
    assert session.qo_indptr.tolist() == [0, 2, 4, 6, 8]
    want_mask = [0]
    for n in prefix + [SEQ_LEN_FILL]:
        want_mask.append(want_mask[-1] + 2 * (n + 2))
    assert session.mask_indptr.tolist() == want_mask
    pool = template.kv_pool.reshape(-1, 1, 576)
    for row, (r, n) in enumerate(zip([0, 1, 2], prefix)):
        want = pool[slots_from_pages(store, r, n + 2)[n:]]
        assert not want.isnan().any()
        assert torch.equal(session.k_extend[2 * row:2 * row + 2], want), row


def _interpreter_missing() -> str | None:
    if torch.cuda.is_available():
        return "a CUDA device is here: the Triton interpreter lane is for CPU (the GPU test below covers it)"
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "TRITON_INTERPRET is set to something other than 1"
    error = SGLangTritonBackend().import_error()
    return None if error is None else f"SGLang's Triton kernels do not import here (make triton-cpu): {error}"


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_triton_session_call_equals_the_eager_adapter_on_cpu(mode):
    """The session's kernel call on its own buffers (padded batch, stale scratch) gives the eager adapter's
    answer for the real rows, bit for bit: the call the graph captures, run without a graph."""
    why = _interpreter_missing()
    if why:
        pytest.skip(why)
    case = make_case(mode, drafts=2 if mode == "verify" else 1)
    store, template = make_store(case, [5, 130, 64, 200])
    backend = SGLangTritonBackend()
    session = TritonGraphSession(backend, 4, 400, template)
    session.bs = 4
    session.set_batch(4, None, [SEQ_LEN_FILL] * 4)
    session.fill(capture=True)
    session.forward()                        # the capture-time call leaves its partials in the scratch
    prefix = [50, 129, 10]
    cache = cache_seqlens_for(case, prefix)
    store.write_up_to(cache)
    q = draw_normal((3, case.s_q, case.heads, case.d_qk), torch.Generator().manual_seed(3), torch.float16)
    session.prepare(q, torch.tensor(padded_lengths(prefix, 4), dtype=torch.int32))
    out, lse = session.eager_same_buffers()
    want_out, want_lse = backend.run(store.inputs(q, cache))
    assert not want_out.isnan().any()
    assert torch.equal(out[:3], want_out) and torch.equal(lse[:3], want_lse)


# ---- on the GPU ---------------------------------------------------------------------------------

def _gpu_backend(name):
    from harness.backends import BUILTIN
    return BUILTIN[name]()


@pytest.mark.parametrize("name", builtins_supporting(Feature.GRAPH))
def test_graph_suite_runs_on_the_gpu(name):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (CUDA-graph capture); none here")
    from harness.running.runner import run_case
    backend = _gpu_backend(name)
    if not backend.available():
        pytest.skip(f"{name}: {backend.availability()}")
    suite = load_suite("graph").cases
    cases = [next(c for c in suite if c.group == g) for g in dict.fromkeys(c.group for c in suite)]
    # one case a group (the CLI runs them all), but those the backend's API refuses (FlagGems': one query token
    # a request, no fp8 descale): every other one captured, replayed and judged
    taken = [c for c in cases if backend.unsupported_reason(c, "cuda") is None]
    rows = [run_case(c, backend, name, "cuda") for c in taken]
    ran = [r for r in rows if r["status"] in ("pass", "fail")]
    assert ran and len(ran) == len(rows), [(r["case_id"], r["status"], r.get("reason")) for r in rows if r not in ran]
    assert all(r["metrics"]["graph"]["steps"] >= 20 for r in ran)
    stream_sessions = {cls.__name__ for cls in TokenGraphSession.__subclasses__()}
    for r in ran:
        graph = r["metrics"]["graph"]
        assert graph["index"] == ("token stream" if graph["session"] in stream_sessions else "block table"), graph


# ---- the graph scenario's token-stream path, with an eager stand-in for the CUDA graph (CPU) ----------

class EagerGraph:
    """``replay`` reruns the captured call on the session's buffers: what a CUDA graph does, minus the graph."""

    def __init__(self, session):
        self.session = session

    def replay(self):
        self.session.captured = self.session.forward()


class CPUTritonGraphSession(TritonGraphSession):
    def capture(self, bs, rows_pages=None):
        self.bs = bs
        self.set_batch(bs, None, [SEQ_LEN_FILL] * bs)
        self.fill(capture=True)
        self.captured = self.forward()
        self.graph = EagerGraph(self)


class OffByOneSlot(CPUTritonGraphSession):
    """Fills every real row's stream one slot too far along."""

    def stream(self):
        indptr, slots = super().stream()
        return indptr, slots + 1


class SlotOutsideThePool(CPUTritonGraphSession):
    def stream(self):
        indptr, slots = super().stream()
        slots[-1] = self.template.kv_pool.shape[0] * self.template.kv_pool.shape[1]
        return indptr, slots


def graph_backend(session_cls):
    class Backend(SGLangTritonBackend):
        def graph_session(self, max_bs, max_context_len, inputs):
            return session_cls(self, max_bs, max_context_len, inputs)
    return Backend()


def graph_case(mode):
    cid = f"graph-cpu/{mode}"
    return Case(id=cid, seed=case_seed(cid, 0), mode=mode, batch_size=3, heads=4, dtype="fp16",
                draft_tokens=2 if mode == "verify" else 1, seqlen="list:5,63,100", scenario="graph")


def test_the_scenario_replays_at_least_20_steps():
    from harness.scenarios import graph
    assert graph.GRAPH_STEPS >= 20


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_graph_steps_pass_through_the_token_stream_path(mode, monkeypatch):
    why = _interpreter_missing()
    if why:
        pytest.skip(why)
    from harness.scenarios import graph
    monkeypatch.setattr(graph, "GRAPH_STEPS", 3 if mode == "decode" else 2)   # the interpreter is slow
    outcome = graph.run_steps(graph_case(mode), graph_backend(CPUTritonGraphSession), "cpu")
    assert outcome.status.value == "pass", outcome.messages
    g = outcome.metrics["graph"]
    assert g["steps"] == graph.GRAPH_STEPS and g["index"] == "token stream"
    assert g["engine_eager_bitwise_equal"] and g["eager_nondeterministic_steps"] == []
    assert min(g["real_batch_sizes"]) < 3          # some steps ran with padding rows


def test_graph_steps_catch_a_stream_one_slot_off(monkeypatch):
    why = _interpreter_missing()
    if why:
        pytest.skip(why)
    from harness.scenarios import graph
    monkeypatch.setattr(graph, "GRAPH_STEPS", 2)
    outcome = graph.run_steps(graph_case("decode"), graph_backend(OffByOneSlot), "cpu")
    assert outcome.status.value == "fail"
    assert "graph.vs_engine_eager" in outcome.failed_checks or any(c.startswith("out.") for c in outcome.failed_checks)


def test_graph_gate_refuses_a_slot_outside_the_pool_before_replay():
    why = _interpreter_missing()     # the capture runs the kernel once, in the Triton interpreter
    if why:
        pytest.skip(why)
    from harness.scenarios import graph
    with pytest.raises(InputError, match="outside the pool"):
        graph.run_steps(graph_case("decode"), graph_backend(SlotOutsideThePool), "cpu")
