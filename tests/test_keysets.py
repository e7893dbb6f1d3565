"""Key sets (``reference/keysets.py``): a new attention mode is one filling of what each query token reads.

The toy mode here reads a random subset of each query token's visible context.  It is added in this file
alone: it fills ``Inputs.token_slots``, and the torch backend, the launch gate, the oracle, the comparison
and the outcome take it as they are.
"""

import dataclasses
import math

import numpy as np
import pytest
import torch

from harness.backends.torch_backend import TorchBackend
from harness.building.inputs import Inputs, generate
from harness.errors import InputError
from harness.judging.oracle import expected
from harness.planning.cases import Case
from harness.recording.status import Status
from harness.running.backend_loader import load_backend
from harness.scenarios import _common
from reference import Problem, key_set_attention_loop, keysets, mla_attention_many
from reference.sparse import sparse_attention


def random_subset_of_context(inputs: Inputs, seed: int, keep: float = 0.5) -> Inputs:
    """The toy mode: each query token reads a random subset (in random order, -1 padded) of the keys it
    would see in dense causal attention, taken from its request's ``req_to_token`` row."""
    gen = np.random.default_rng(seed)
    b, s_q = inputs.batch_size, inputs.s_q
    counts = keysets.causal_counts(inputs.cache_seqlens.tolist(), s_q, inputs.causal)
    rows = inputs.req_to_token[inputs.req_pool_indices.long()].numpy()
    width = int(counts.max()) if counts.size else 0
    slots = np.full((b, s_q, max(width, 1)), -1, dtype=np.int32)
    for r in range(b):
        for i in range(s_q):
            n = int(counts[r, i])
            chosen = gen.permutation(n)[:int(gen.binomial(n, keep))]
            slots[r, i, gen.permutation(slots.shape[2])[:len(chosen)]] = rows[r, chosen]
    return dataclasses.replace(inputs, token_slots=torch.from_numpy(slots))


def toy_run(case: Case, backend, seed: int = 0):
    """The toy mode's scenario: the shared launch and judging, on inputs whose key sets it chose."""
    inputs = random_subset_of_context(generate(case), seed)
    call = _common.launch(backend, inputs)
    return _common.verdicts([_common.expect(case, backend, inputs, call)])[0], inputs


CASES = [
    Case(id="toy/decode", seed=3, batch_size=3, seqlen="list:70,1,200", d_qk=64, d_v=32, heads=4),
    Case(id="toy/verify", seed=4, mode="verify", draft_tokens=3, batch_size=2, seqlen="list:130,0",
         d_qk=64, d_v=32, heads=8, kv_heads=2, page_size=16),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_toy_mode_passes_through_the_torch_backend_and_the_oracle(case):
    outcome, inputs = toy_run(case, load_backend("torch"))
    assert outcome.status is Status.PASS, outcome.messages
    assert (inputs.token_slots == -1).any() and (inputs.token_slots >= 0).any()


class IgnoresKeySets(TorchBackend):
    """A kernel that reads each request's whole causal context instead of the query token's key set."""

    name = "ignores-key-sets"

    def run(self, inputs):
        return super().run(dataclasses.replace(inputs, token_slots=None))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_toy_mode_fails_a_kernel_that_reads_the_dense_context(case):
    outcome, _ = toy_run(case, IgnoresKeySets())
    assert outcome.status is Status.FAIL


def definition(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The toy mode's attention written out directly: float64, one query token and head at a time."""
    b, s_q, h_q, d = inputs.q.shape
    pool = inputs.kv_pool.reshape(-1, inputs.kv_pool.shape[2], d).double()
    group = h_q // pool.shape[1]
    out = torch.zeros(b, s_q, h_q, inputs.d_v, dtype=torch.float64)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float64)
    for r in range(b):
        for i in range(s_q):
            slots = inputs.token_slots[r, i]
            keys = pool[slots[slots >= 0].long()]
            for h in range(h_q if len(keys) else 0):
                scores = keys[:, h // group] @ inputs.q[r, i, h].double() * inputs.softmax_scale
                lse[r, h, i] = torch.logsumexp(scores, 0)
                out[r, i, h] = torch.softmax(scores, 0) @ keys[:, h // group, :inputs.d_v]
    return out, lse


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_oracle_of_the_toy_mode_is_its_definition(case):
    inputs = random_subset_of_context(generate(case), seed=1)
    inputs.token_slots[0, 0] = -1             # a token with no key: out 0, LSE +inf
    out, lse = expected(inputs)
    want_out, want_lse = definition(inputs)
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)
    assert torch.isposinf(lse[0, :, 0]).all() and (out[0, 0] == 0).all()


def test_the_gate_refuses_a_key_set_outside_the_pool():
    inputs = random_subset_of_context(generate(CASES[0]), seed=2)
    bad = inputs.token_slots.clone()
    bad[1, 0, 0] = inputs.num_pages * inputs.page_size
    with pytest.raises(InputError, match="request 1, query token 0: key 0 is slot"):
        _common.launch(load_backend("torch"), dataclasses.replace(inputs, token_slots=bad))


def test_the_dense_form_is_the_block_table_prefix_with_the_causal_count():
    table = np.array([[5, 2, -1], [7, -1, -1]], dtype=np.int32)
    keys = keysets.dense(table, [70, 3], page_size=64, s_q=2, causal=True)
    assert keys.slot_list(0).tolist() == [5 * 64 + t for t in range(64)] + [2 * 64 + t for t in range(6)]
    assert keys.slot_list(1).tolist() == [7 * 64, 7 * 64 + 1, 7 * 64 + 2]
    assert keys.visible.tolist() == [[69, 70], [2, 3]]
    assert keysets.dense(table, [70, 3], 64, 2, causal=False).visible.tolist() == [[70, 70], [3, 3]]


def test_per_token_key_sets_are_the_sparse_oracle_on_the_same_index_rows():
    """The sparse oracle's input (index rows, -1 invalid, a slot listed twice read twice) is another filling:
    the batched oracle over ``keysets.per_token`` gives ``reference.sparse``'s numbers."""
    g = torch.Generator().manual_seed(5)
    n, heads, d, d_v, slots = 6, 4, 24, 16, 40
    pool = torch.randn(slots, 1, 1, d, generator=g, dtype=torch.float64)
    q = torch.randn(n, heads, d, generator=g, dtype=torch.float64)
    rows = torch.randint(-1, slots, (n, 7), generator=g)
    rows[0] = -1                                   # an empty row
    rows[1, :2] = 3                                # one slot listed twice
    keys = keysets.per_token(rows.numpy(), page_size=1)
    out, lse = mla_attention_many([Problem(q[:, None], pool, keys, 0.3, d_v)])[0]
    want_out, want_lse = sparse_attention(q, pool.reshape(slots, d), rows, 0.3, d_v)
    torch.testing.assert_close(out[:, 0], want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse[:, :, 0], want_lse, rtol=1e-12, atol=1e-12)
    loop_out, loop_lse = key_set_attention_loop(q[:, None], pool, keys, 0.3, d_v)
    torch.testing.assert_close(loop_out, out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(loop_lse, lse, rtol=1e-12, atol=1e-12)
