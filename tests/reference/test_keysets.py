"""Key sets (``reference/keysets.py``): what each query token may read, the one name dense and sparse share.

Dense paged decode and verify fill them from a block table and lengths (``keysets.dense``); a sparse case's
index rows are its key sets as they are (``keysets.per_token``): the harness's sparse oracle, reading the
records, gives the batched oracle's numbers over them.
"""

import dataclasses

import numpy as np
import torch

from harness.building.inputs import Inputs
from harness.building.sparse_cache import dequantize, read_records
from harness.building.sparse_inputs import build
from harness.judging.sparse_oracle import expected
from harness.planning.cases import Case, validate_case
from reference import Problem, key_set_attention_loop, keysets, mla_attention_many
from reference.sparse import sparse_attention, with_sink


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


def test_a_sparse_cases_index_rows_are_its_key_sets():
    """The sparse oracle (records read entry by entry, in blocks of rows) is the batched oracle over
    ``keysets.per_token`` of the case's index rows, on the records dequantized whole."""
    case = validate_case(Case(id="keysets/sparse/0", seed=9, scenario="sparse", heads=16, topk=64, batch_size=3,
                              mode="verify", draft_tokens=2, seqlen="list:20,64,100", index_pattern="repeat",
                              sink="random"), "test")
    scase = build(case, "cpu")
    inputs = scase.inputs
    n, s_q, heads, d = inputs.q.shape
    pool = inputs.kv_pool.view(inputs.kv_pool.shape[0], -1)
    keys = dequantize(read_records(pool, torch.arange(inputs.num_slots), inputs.fmt, inputs.page_size),
                      inputs.fmt, "exact")
    rows = inputs.indices.reshape(n * s_q, -1)
    assert (rows == -1).any() and (rows >= 0).any()
    per_token = keysets.per_token(rows.numpy(), page_size=1)
    out, lse = mla_attention_many([Problem(inputs.q.reshape(n * s_q, 1, heads, d), keys[:, None, None],
                                           per_token, inputs.softmax_scale, inputs.d_v)])[0]
    out, lse = with_sink(out[:, 0], lse[:, :, 0], inputs.attn_sink)
    want_out, want_lse = expected(scase, "exact")
    torch.testing.assert_close(want_out.reshape(n * s_q, heads, -1), out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(want_lse.transpose(1, 2).reshape(n * s_q, heads), lse, rtol=1e-12, atol=1e-12)


def test_the_dense_inputs_carry_no_second_form_of_key_set():
    """What each query token reads has one name: the dense inputs give ``KeySets`` from their table, and a
    per-query-token list of slots is a sparse case's index rows, not a field of the dense inputs."""
    assert [f.name for f in dataclasses.fields(Inputs) if "slot" in f.name] == []
