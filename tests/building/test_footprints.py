"""Each footprint the size estimate sums (``resources``) is exported by the code that allocates it; these
hold each one to what that code allocates for a case."""

import pytest

from harness.backends.torch_backend import TorchBackend
from harness.building import inputs
from harness.judging.integrity import HASH_ROW_BYTES, witness_bytes
from harness.planning.cases import Case, case_seed
from reference.batched import MAX_BLOCK_ELEMENTS, oracle_block_bytes


def _case(**fields) -> Case:
    case_id = "footprints/" + "-".join(f"{k}={v}" for k, v in fields.items()) + "/0"
    base = dict(batch_size=5, heads=16, seqlen="uniform:1:300", extra_pages=3, shared_prefix=64)
    return Case(id=case_id, seed=case_seed(case_id, 7), **(base | fields))


@pytest.mark.parametrize("fields", [{}, {"dtype": "fp8_e4m3"}, {"mode": "verify", "draft_tokens": 3},
                                    {"pool_pages": 64, "page_size": 16}])
def test_the_inputs_footprint_is_what_generate_allocates(fields):
    case = _case(**fields)
    built = inputs.generate(case)
    made = inputs.footprint(case)
    pools = built.kv_pool.nbytes + (0 if built.kv_pool_model is None else built.kv_pool_model.nbytes)
    assert made["pools"] == pools
    assert made["q"] == (built.q if built.q_model is None else built.q_model).nbytes
    assert inputs.used_pages(case) == len(set(built.block_table[built.block_table >= 0].tolist()))
    assert made["layout"] >= built.req_to_token.nbytes          # req_to_token, and the index tensors
    assert made["outputs"] == 2 * 8 * inputs.output_buffer(built).numel()


def test_the_oracle_block_is_capped_and_counts_the_wider_of_scores_and_keys():
    assert oracle_block_bytes(4, 100, 16, 576) == 4 * 100 * 576 * 8 * 3
    assert oracle_block_bytes(4, 100, 1024, 576) == 4 * 100 * 1024 * 8 * 3
    assert oracle_block_bytes(4, 0, 16, 576) == 4 * 1 * 576 * 8 * 3           # no keys: one key's worth
    assert oracle_block_bytes(512, 163_840, 128, 576) == MAX_BLOCK_ELEMENTS * 8 * 3


def test_the_witness_and_the_kernel_split_follow_their_modules():
    assert witness_bytes(100 * HASH_ROW_BYTES, 10) == 2 * (100 * 8 + 10)
    keys = TorchBackend.estimated_split_keys
    split = TorchBackend.split_bytes
    assert split(3, keys + 1, 576) == split(3, keys, 576) == 3 * keys * 576 * 4 * 3
    assert TorchBackend.split_bytes(3, 7, 576) == 3 * 7 * 576 * 4 * 3
