"""The sparse oracle (reference/sparse.py) against a loop over query rows, heads and index entries
written here, and its conventions: -1 entries, empty rows, repeated slots, sinks."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference.sparse import ROW_BLOCK_ELEMENTS, sparse_attention

TIGHT = {"rtol": 1e-10, "atol": 1e-12}


def loop_attention(q, keys, indices, scale, d_v, sink=None):
    """One query row and head at a time, in Python: the definition, with nothing shared."""
    n, h, _ = q.shape
    out = torch.zeros(n, h, d_v, dtype=torch.float64)
    lse = torch.full((n, h), math.inf, dtype=torch.float64)
    for t in range(n):
        slots = [int(i) for i in indices[t] if int(i) != -1]
        for hh in range(h):
            if not slots:
                continue
            s = [scale * float(q[t, hh].double() @ keys[j].double()) for j in slots]
            m = max(s)
            total = sum(math.exp(x - m) for x in s)
            lse[t, hh] = m + math.log(total)
            for x, j in zip(s, slots):
                out[t, hh] += math.exp(x - m) / total * keys[j, :d_v].double()
            if sink is not None:
                sk = float(sink[hh])
                out[t, hh] *= 0.0 if sk == math.inf else 1.0 / (1.0 + math.exp(sk - lse[t, hh]))
    return out, lse


def problem(seed, n=5, h=3, d=24, d_v=16, slots=40, topk=12):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n, h, d, generator=gen, dtype=torch.float64)
    keys = torch.randn(slots, d, generator=gen, dtype=torch.float64)
    indices = torch.randint(0, slots, (n, topk), generator=gen, dtype=torch.int32)
    return q, keys, indices, d_v


@given(seed=st.integers(0, 2**16), holes=st.floats(0, 1), use_sink=st.booleans())
def test_matches_loop(seed, holes, use_sink):
    q, keys, indices, d_v = problem(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    indices = torch.where(torch.rand(indices.shape, generator=gen) < holes, -1, indices)
    sink = torch.randn(q.shape[1], generator=gen, dtype=torch.float64) if use_sink else None
    out, lse = sparse_attention(q, keys, indices, 0.3, d_v, sink)
    exp_out, exp_lse = loop_attention(q, keys, indices, 0.3, d_v, sink)
    torch.testing.assert_close(out, exp_out, **TIGHT)
    torch.testing.assert_close(lse, exp_lse, **TIGHT)


def test_poison_outside_the_key_set_never_reaches_the_answer():
    q, keys, indices, d_v = problem(3)
    indices[:, 6:] = -1
    poisoned = keys.clone()
    used = set(indices[indices >= 0].tolist())
    for j in range(keys.shape[0]):
        if j not in used:
            poisoned[j] = math.nan
    out, lse = sparse_attention(q, poisoned, indices, 0.3, d_v)
    exp_out, exp_lse = sparse_attention(q, keys, indices, 0.3, d_v)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    torch.testing.assert_close(out, exp_out, **TIGHT)


def test_empty_row_is_zero_with_lse_plus_inf_even_with_a_sink():
    q, keys, indices, d_v = problem(4)
    indices[2] = -1
    out, lse = sparse_attention(q, keys, indices, 0.3, d_v, sink=torch.tensor([0.5, math.inf, -math.inf]))
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    assert torch.isposinf(lse[2]).all()
    assert torch.isfinite(out[[0, 1, 3, 4]]).all()


def test_no_valid_entry_anywhere_needs_no_keys():
    q, keys, indices, d_v = problem(9)
    out, lse = sparse_attention(q, keys[:0], torch.full_like(indices, -1), 0.3, d_v)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isposinf(lse).all()


def test_sink_plus_inf_zeroes_minus_inf_changes_nothing_and_lse_excludes_it():
    q, keys, indices, d_v = problem(5)
    plain_out, plain_lse = sparse_attention(q, keys, indices, 0.3, d_v)
    out, lse = sparse_attention(q, keys, indices, 0.3, d_v, sink=torch.tensor([math.inf, -math.inf, 0.0]))
    assert torch.equal(lse, plain_lse)
    assert torch.equal(out[:, 0], torch.zeros_like(out[:, 0]))
    assert torch.equal(out[:, 1], plain_out[:, 1])
    factor = torch.exp(plain_lse[:, 2]) / (torch.exp(plain_lse[:, 2]) + 1.0)
    torch.testing.assert_close(out[:, 2], plain_out[:, 2] * factor[:, None], **TIGHT)


def test_a_repeated_slot_counts_each_time_it_is_listed():
    q, keys, indices, d_v = problem(6, topk=4)
    indices[:] = torch.tensor([7, 7, 9, -1], dtype=torch.int32)
    out, lse = sparse_attention(q, keys, indices, 0.3, d_v)
    s7, s9 = (0.3 * q @ keys[j] for j in (7, 9))
    torch.testing.assert_close(lse, torch.logaddexp(s7 + math.log(2), s9), **TIGHT)


def test_row_blocks_do_not_change_the_answer(monkeypatch):
    q, keys, indices, d_v = problem(7, n=9)
    whole = sparse_attention(q, keys, indices, 0.3, d_v)
    monkeypatch.setattr("reference.sparse.ROW_BLOCK_ELEMENTS", 2 * 12 * 24)     # two rows a block
    assert ROW_BLOCK_ELEMENTS > 2 * 12 * 24
    blocked = sparse_attention(q, keys, indices, 0.3, d_v)
    assert torch.equal(whole[0], blocked[0]) and torch.equal(whole[1], blocked[1])


def test_shapes_that_disagree_are_refused():
    q, keys, indices, d_v = problem(8)
    with pytest.raises(ValueError, match="index rows"):
        sparse_attention(q, keys, indices[:3], 0.3, d_v)
    with pytest.raises(ValueError, match="neither -1"):
        sparse_attention(q, keys, torch.full_like(indices, 40), 0.3, d_v)
    with pytest.raises(ValueError, match="neither -1"):
        sparse_attention(q, keys, torch.full_like(indices, -2), 0.3, d_v)
    with pytest.raises(ValueError, match="columns"):
        sparse_attention(q, keys[:, :10], indices, 0.3, d_v)
