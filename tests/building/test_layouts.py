"""Layouts (``Case.layout``; harness/building/layouts.py): the tensors a kernel reads as views into larger
buffers, at a storage offset, or q in two parts of its own, the same values, the oracle's same answer bit for
bit, the slack poisoned and watched by the input witness, and a kernel that assumes contiguous q caught."""

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from harness.backends.capabilities import Capabilities
from harness.backends.torch_backend import TorchBackend
from harness.building import layouts
from harness.building.inputs import footprint, generate, output_buffer
from harness.building.sparse_inputs import build
from harness.errors import InputError, Unsupported
from harness.fuzz.draw import input_fields
from harness.fuzz.space import LAYOUT_CHOICES
from harness.judging import integrity, oracle, sparse_oracle
from harness.mutants import load_mutant
from harness.planning.case import LAYOUTS, VALUES
from harness.planning.case_checks import SPLIT_Q_SCENARIOS, layout_scenarios
from harness.planning.cases import Case, load_suite, validate_case
from harness.recording.status import Status
from harness.running.backend_loader import load_backend
from harness.scenarios import run


def dense_case(**kw) -> Case:
    fields = dict(id="layouts/t/0", seed=9, batch_size=3, heads=8, seqlen="uniform:1:200", mode="verify",
                  draft_tokens=2)
    return validate_case(Case(**{**fields, **kw}), "test")


def sparse_case(**kw) -> Case:
    fields = dict(id="layouts/s/0", seed=4, scenario="sparse", topk=64, heads=16, batch_size=3,
                  seqlen="uniform:1:200")
    return validate_case(Case(**{**fields, **kw}), "test")


def assert_same_answer(a: tuple, b: tuple):
    """The same out and LSE bit for bit (NaN included: a writer's NaN record reads as NaN in every layout)."""
    for x, y in zip(a, b):
        assert torch.equal(x.view(torch.int64), y.view(torch.int64))


@given(seed=st.integers(0, 2 ** 16), mode=st.sampled_from(["decode", "verify"]),
       dtype=st.sampled_from(["bf16", "fp8_e4m3"]), kv_heads=st.sampled_from([1, 2]),
       q_values=st.sampled_from(VALUES), kv_values=st.sampled_from(VALUES),
       seqlen=st.sampled_from(["uniform:0:150", "list:1,64,65", "equal:129"]))
def test_the_oracle_answers_every_layout_bit_for_bit_alike(seed, mode, dtype, kv_heads, q_values, kv_values, seqlen):
    case = dense_case(seed=seed, mode=mode, draft_tokens=3 if mode == "verify" else 1, dtype=dtype, heads=4,
                      kv_heads=kv_heads, q_values=q_values, kv_values=kv_values, seqlen=seqlen)
    answers = [oracle.expected(generate(dataclasses.replace(case, layout=layout))) for layout in LAYOUTS]
    for other in answers[1:]:
        assert_same_answer(answers[0], other)


@given(seed=st.integers(0, 2 ** 16), kv_values=st.sampled_from(VALUES),
       fmt=st.sampled_from([("v32", "amax", 576), ("v4", "ue8m0", 512)]))
def test_the_sparse_oracle_answers_every_layout_bit_for_bit_alike(seed, kv_values, fmt):
    case = sparse_case(seed=seed, kv_values=kv_values, kv_format=fmt[0], kv_scales=fmt[1], d_qk=fmt[2])
    answers = [sparse_oracle.expected(build(dataclasses.replace(case, layout=layout), "cpu"), "exact")
               for layout in LAYOUTS if "sparse" in layout_scenarios(layout)]
    for other in answers[1:]:
        assert_same_answer(answers[0], other)


def test_strided_tensors_are_sliced_views_of_larger_poisoned_buffers():
    case = dense_case(dtype="fp8_e4m3")
    plain, relaid = generate(case), generate(dataclasses.replace(case, layout="strided"))
    for name in layouts.DENSE_READ:
        a, b = getattr(plain, name), getattr(relaid, name)
        assert torch.equal(a.view(torch.uint8), b.contiguous().view(torch.uint8)), name
        assert b.stride(-1) == 1 and b.untyped_storage().nbytes() > a.numel() * a.element_size(), name
        if b.dim() > 1:
            assert not b.is_contiguous() and b.stride(-2) == b.shape[-1] + layouts.STRIDED_SLACK, name
    q = relaid.q                                     # the slack after a row of q: NaN (fp8's 0x7F)
    slack = torch.as_strided(q, (layouts.STRIDED_SLACK,), (1,), q.storage_offset() + q.shape[-1])
    assert bool(torch.isnan(slack.float()).all())
    table = relaid.block_table
    assert int(torch.as_strided(table, (1,), (1,), table.storage_offset() + table.shape[-1])) == layouts.INT_POISON


def test_offset_tensors_start_past_the_storages_beginning():
    relaid = generate(dense_case(layout="offset"))
    for name in ("q", "kv_pool", "block_table", "cache_seqlens", "req_to_token"):
        t = getattr(relaid, name)
        assert t.is_contiguous() and t.storage_offset() * t.element_size() == layouts.OFFSET_BYTES, name


def test_a_sparse_pool_keeps_its_records_and_widens_its_page_stride():
    case = sparse_case(index_pattern="holes")
    plain, relaid = build(case, "cpu").inputs, build(dataclasses.replace(case, layout="strided"), "cpu").inputs
    assert relaid.kv_pool.stride(0) == plain.kv_pool.stride(0) + layouts.STRIDED_SLACK
    assert relaid.kv_pool.stride()[1:] == plain.kv_pool.stride()[1:] and torch.equal(relaid.kv_pool, plain.kv_pool)
    assert not relaid.indices.is_contiguous() and torch.equal(relaid.indices, plain.indices)


@pytest.mark.parametrize("layout", ["strided", "offset"])
@pytest.mark.parametrize("name", ["q", "kv_pool", "block_table"])
def test_a_write_into_the_slack_beside_a_view_is_seen_by_the_witness(layout, name):
    inputs = generate(dense_case(layout=layout))
    inputs = dataclasses.replace(inputs, out=output_buffer(inputs))
    t = getattr(inputs, name)
    # strided: the slack right after the first row of the last dim; offset: the bytes just before the view
    at = t.storage_offset() + t.shape[-1] if layout == "strided" else t.storage_offset() - 1
    witness = integrity.Witness(inputs)
    torch.as_strided(t, (1,), (1,), at).fill_(7)
    assert integrity.changed_flags([witness.seal()]) == [True]
    assert name in witness.describe()


def test_a_kernel_that_reads_q_contiguously_fails_strided_q_only():
    mutant = load_mutant("contiguous_q")
    for layout, status in (("contiguous", Status.PASS), ("offset", Status.PASS), ("strided", Status.FAIL)):
        outcome = run(dense_case(layout=layout), mutant, "cpu")
        assert outcome.status is status, (layout, outcome.messages)
    assert "out.nonfinite" in run(dense_case(layout="strided"), mutant, "cpu").failed_checks


def test_the_size_estimate_counts_the_relaid_copies():
    case = dense_case(dtype="fp8_e4m3")
    plain, strided = footprint(case), footprint(dataclasses.replace(case, layout="strided"))
    # the strided fp8 pool has two kv heads where the bf16 and fp8 ones have one: its copy is over 2/3 of them
    assert strided["pools"] > 1.5 * plain["pools"] and strided["q"] > 3 * plain["q"]     # q: fp8 and bf16 copies
    assert footprint(dataclasses.replace(case, layout="contiguous")) == plain


def test_the_layouts_suite_passes_on_the_torch_backend():
    """Every case passes but split_q's fp8 ones, which it refuses: it takes an fp8 q quantised whole."""
    suite = load_suite("layouts").cases
    refused = [c for c in suite if c.layout == "split_q" and c.dtype.startswith("fp8")]
    for case in refused:       # raised at the call, recorded as unsupported with these words (chunk.run_chunk)
        with pytest.raises(Unsupported, match="layout split_q with fp8: this kernel takes q quantised whole"):
            run(case, TorchBackend(), "cpu")
    outcomes = {c.id: run(c, TorchBackend(), "cpu") for c in suite if c not in refused}
    assert refused and {o.status for o in outcomes.values()} == {Status.PASS}, \
        {k: o.messages or o.reason for k, o in outcomes.items() if o.status is not Status.PASS}
    assert {c.layout for c in suite} == set(LAYOUTS) - {"contiguous"}
    assert {c.layout for c in suite if c.scenario == "sparse"} == {"strided", "offset"}
    assert {c.scenario for c in suite if c.layout == "split_q"} == set(SPLIT_Q_SCENARIOS)


@pytest.mark.parametrize("dtype", ["bf16", "fp8_e4m3"])
def test_split_q_hands_the_model_query_in_two_buffers_as_deepseeks_attention_does(dtype):
    case = dense_case(dtype=dtype)
    plain, split = generate(case), generate(dataclasses.replace(case, layout="split_q"))
    model_q = plain.q if plain.q_model is None else plain.q_model
    assert torch.equal(split.q.view(torch.uint8), plain.q.view(torch.uint8))        # q itself as built
    assert plain.q_nope is None and plain.q_rope is None
    nope, rope = split.q_nope, split.q_rope
    assert torch.equal(nope, model_q[..., :case.d_v]) and torch.equal(rope, model_q[..., case.d_v:])
    b, s_q, h, _ = model_q.shape
    assert nope.stride(2) == b * s_q * case.d_v and nope.stride(-1) == 1     # heads outermost: the bmm's output
    assert rope.stride(2) == layouts.PROJECTED_NOPE + rope.shape[-1]         # a view of the projected rows
    assert rope.storage_offset() == layouts.PROJECTED_NOPE
    storages = {t.untyped_storage().data_ptr() for t in (nope, rope, model_q)}
    assert len(storages) == 3
    before_rope = torch.as_strided(rope, (layouts.PROJECTED_NOPE,), (1,), 0)
    assert bool(torch.isnan(before_rope.float()).all())                   # what lies before rope is poison
    assert footprint(dataclasses.replace(case, layout="split_q"))["q"] > footprint(case)["q"]


def test_a_write_before_split_q_rope_is_seen_by_the_witness():
    inputs = generate(dense_case(layout="split_q"))
    inputs = dataclasses.replace(inputs, out=output_buffer(inputs))
    witness = integrity.Witness(inputs)
    torch.as_strided(inputs.q_rope, (1,), (1,), 0).fill_(7)
    assert integrity.changed_flags([witness.seal()]) == [True] and "q_rope" in witness.describe()


def test_a_kernel_that_reads_split_q_packed_fails_split_q_only():
    mutant = load_mutant("split_q_packed")
    for layout, status in (("contiguous", Status.PASS), ("strided", Status.PASS), ("split_q", Status.FAIL)):
        assert run(dense_case(layout=layout), mutant, "cpu").status is status, layout
    assert run(dense_case(layout="split_q"), TorchBackend(), "cpu").status is Status.PASS


def test_a_kernel_that_takes_q_whole_refuses_split_q_in_its_apis_words():
    words = Capabilities().reason_unsupported(dense_case(layout="split_q"), "cpu")
    assert words.startswith("layout split_q not supported (takes contiguous, strided, offset)")
    assert "its API takes q as one tensor" in words
    assert Capabilities().reason_unsupported(dense_case(layout="strided"), "cpu") is None
    for name in ("flashinfer-fa3", "flashinfer-fa2", "torch"):
        assert "split_q" in load_backend(name).capabilities.layouts, name
    assert "split_q" not in load_backend("flashmla").capabilities.layouts
    one_row = dataclasses.replace(dense_case(layout="split_q"), draft_tokens=1)      # past FlagGems' s_q limit
    for name, call in (("flashmla", "flash_mla_with_kvcache(q: torch.Tensor,"),
                       ("sglang-triton", "decode_attention_fwd(q, k_buffer,"),
                       ("sglang-verify-mla", "verify_shared_kv_fwd(q_extend,"),
                       ("flaggems", "flash_mla(q, block_table,")):
        words = load_backend(name).capabilities.reason_unsupported(one_row, "cuda")
        assert words.startswith("layout split_q not supported") and f"`{call}" in words, (name, words)


def test_split_q_is_refused_in_a_sparse_case_and_never_drawn_for_one():
    with pytest.raises(InputError, match="layout: 'split_q' applies to the scenarios call, determinism, "):
        validate_case(dataclasses.replace(sparse_case(), layout="split_q"), "here")
    rng = np.random.default_rng(0)
    drawn = [input_fields(rng, "sparse").get("layout") for _ in range(400)]
    assert "split_q" not in drawn and "strided" in drawn
    assert "split_q" in [input_fields(rng, "call").get("layout") for _ in range(400)]
    assert sorted(v for v, _ in LAYOUT_CHOICES) == sorted(LAYOUTS)
