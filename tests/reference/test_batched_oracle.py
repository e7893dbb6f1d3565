"""The oracle's batched form (``reference/batched.py``): many calls at once give each call the bits it
gets alone, and the values of the loop definition.  Blocks shared between calls are a GPU's plan; they
are forced on here so the CPU checks them too."""

import pytest
import torch
from oracle_problems import problems, random_problem

from reference import Problem, batched, key_set_attention_loop, keysets, mla_attention_many


@pytest.fixture(params=[False, True], ids=["own-blocks", "shared-blocks"])
def sharing(request, monkeypatch):
    monkeypatch.setattr(batched, "shares_blocks", lambda device: request.param)
    # one thread: with two, the CPU BLAS's first matmul in a process can differ in its last bits from
    # later ones on the same inputs (see tests/running/test_parallel_runs.py), which is not the batching's doing
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield request.param
    torch.set_num_threads(threads)


def test_many_calls_give_each_the_bits_it_gets_alone(sharing):
    ps = problems()
    together = mla_attention_many(ps)
    for p, (out, lse) in zip(ps, together):
        alone_out, alone_lse = mla_attention_many([p])[0]
        assert torch.equal(out, alone_out) and torch.equal(lse, alone_lse)
    # in reverse, and interleaved with itself: still the same bits
    again = mla_attention_many(ps[::-1] + ps[:3])
    for (out, lse), (out2, lse2) in zip(together[::-1] + together[:3], again):
        assert torch.equal(out, out2) and torch.equal(lse, lse2)


def test_many_calls_match_the_loop_definition(sharing):
    for p in problems():
        out, lse = mla_attention_many([p])[0]
        ref_out, ref_lse = key_set_attention_loop(p.q, p.kv_pool, p.keys, p.softmax_scale, p.d_v,
                                                  p.descale_q, p.descale_k)
        torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse, ref_lse, rtol=1e-12, atol=1e-12)
        assert torch.isfinite(out).all()            # poison past a request's keys never leaks in


def test_a_request_lands_in_a_block_of_one_shape_whatever_its_company(sharing):
    ps = problems()
    alone = {(pi, r): (block.rows, block.n_keys) for pi, p in enumerate(ps)
             for block in batched.plan_blocks([p], torch.float64) for _, r in block.members}
    together = batched.plan_blocks(ps, torch.float64)
    assert sorted(m for block in together for m in block.members) == sorted(alone)
    for block in together:
        for member in block.members:
            assert (block.rows, block.n_keys) == alone[member], member
    shared = [block for block in together if len({pi for pi, _ in block.members}) > 1]
    assert bool(shared) == sharing, "forced sharing must put several calls in one block"


def test_on_the_cpu_a_request_gets_the_bits_it_gets_alone_whatever_its_call_or_block_size(monkeypatch):
    """The CPU BLAS sums a matmul's products in an order set by its whole shape (key count and batch),
    so on the CPU each request is a block alone: its bits are those of a call holding it alone."""
    monkeypatch.setattr(batched, "shares_blocks", lambda device: False)
    for p in problems():
        together = mla_attention_many([p])[0]
        small_blocks = mla_attention_many([p], max_elements=1)[0]
        assert all(torch.equal(a, b) for a, b in zip(together, small_blocks))
        for r, n in enumerate(p.keys.counts):
            keys = keysets.KeySets((n,), p.keys.visible[r:r + 1], p.keys.page_size, p.keys.block_table[r:r + 1])
            alone = Problem(p.q[r:r + 1], p.kv_pool, keys, p.softmax_scale, p.d_v, p.descale_q, p.descale_k)
            out, lse = mla_attention_many([alone])[0]
            assert torch.equal(together[0][r:r + 1], out) and torch.equal(together[1][r:r + 1], lse), (p.keys, r)


def test_a_table_too_narrow_for_a_length_is_refused():
    p = random_problem(0, causal=True, s_q=1, heads=4, lengths=[65, 3])
    keys = keysets.KeySets(p.keys.counts, p.keys.visible, p.keys.page_size, p.keys.block_table[:, :1])
    narrow = Problem(p.q, p.kv_pool, keys, p.softmax_scale, p.d_v)
    with pytest.raises(ValueError, match="request 0: 65 keys need more pages"):
        mla_attention_many([narrow])


def test_only_a_gpu_call_with_a_short_request_joins_shared_blocks():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")       # devices by name: nothing is allocated
    assert batched.joins_shared_blocks(cuda, [0, batched.SHARED_MAX_KEYS, 5000])
    assert not batched.joins_shared_blocks(cuda, [0, batched.SHARED_MAX_KEYS + 1, 5000])   # no keys: no block
    assert not batched.joins_shared_blocks(cpu, [1, 2, 3])


def test_an_answer_without_a_short_request_gets_its_oracle_at_once_with_the_bits_of_its_chunk(monkeypatch):
    """``expect`` runs the oracle of an answer that gains nothing from company right after its kernel;
    the others wait for ``verdicts``.  Either way an answer gets the bits a chunk's pass gives it."""
    from harness.building.inputs import generate
    from harness.planning.cases import Case
    from harness.running.backend_loader import load_backend
    from harness.scenarios import _common
    monkeypatch.setattr(batched, "shares_blocks", lambda device: True)
    backend = load_backend("torch")
    called = {}
    for seqlen in ("list:300,400", "list:20,300"):
        case = Case(id=f"t/{seqlen}", seed=11, batch_size=2, seqlen=seqlen, d_qk=64, d_v=32, heads=4)
        inputs = generate(case)
        called[seqlen] = (case, inputs, _common.launch(backend, inputs))
    early, deferred = (_common.expect(case, backend, inputs, call) for case, inputs, call in called.values())
    assert early.expected is not None and deferred.expected is None
    _common.verdicts([early, deferred])
    together = [_common.Answer(case, backend, inputs, call.out, call.lse) for case, inputs, call in called.values()]
    _common.run_oracles(together)
    for answer, in_chunk in zip((early, deferred), together):
        assert all(torch.equal(a, b) for a, b in zip(answer.expected, in_chunk.expected))
