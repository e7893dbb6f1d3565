"""What a backend is called with (``Inputs``), and what is read from it on the host: the copies of the
table and lengths made before they were sent (``HostCopy``), what each query token reads (``key_sets``),
and the poisoned output buffer an engine hands its kernel (``output_buffer``)."""

from dataclasses import dataclass
from functools import lru_cache

import torch

from reference import KeySets, as_bits, keysets

from .guards import guarded

TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


def torch_dtype(name: str) -> torch.dtype:
    """A dtype by the case's short name (``bf16``) or torch's own (``float32``)."""
    if name in TORCH_DTYPES:
        return TORCH_DTYPES[name]
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype '{name}'")
    return dtype


@dataclass(frozen=True)
class HostCopy:
    """CPU copies of the block table and lengths, as the harness built them before sending them.  The
    launch gate, the oracle and the row read these instead of waiting on the device; they are used
    only while the ``Inputs`` still hold the very tensors that were sent (``describes``)."""

    block_table: torch.Tensor
    cache_seqlens: torch.Tensor
    seq_lens: torch.Tensor
    sent: tuple                       # the device tensors (block_table, cache_seqlens, seq_lens) copied from these

    def describes(self, inputs: "Inputs") -> bool:
        return all(a is b for a, b in zip(self.sent, (inputs.block_table, inputs.cache_seqlens, inputs.seq_lens)))


@dataclass(frozen=True)
class Inputs:
    """What a backend is called with: tensors plus the few kernel parameters it needs.

    Tensors live on one device.  Everything else (batch size, page size, ...) is
    derived, so a variant built with ``dataclasses.replace`` cannot disagree with itself.
    """

    q: torch.Tensor                   # (b, s_q, h_q, d_qk), the kernel's dtype (fp8 for fp8 cases)
    kv_pool: torch.Tensor             # (num_pages, page_size, h_kv, d_qk), the cache dtype
    block_table: torch.Tensor         # (b, max_pages) int32
    cache_seqlens: torch.Tensor       # (b,) int32: seq_lens, plus the draft tokens for verify
    seq_lens: torch.Tensor            # (b,) int32: SGLang's forward_batch.seq_lens
    req_to_token: torch.Tensor        # (max_reqs, max_context) int32: each token's KV slot, as SGLang keeps it
    req_pool_indices: torch.Tensor    # (b,) int32: request r's row of req_to_token
    mode: str                         # "decode" or "verify": verify's cache_seqlens include the drafts
    softmax_scale: float
    d_v: int
    causal: bool
    descale_q: torch.Tensor | None    # (1,) float32, fp8 only
    descale_k: torch.Tensor | None
    q_model: torch.Tensor | None      # fp8 only: q before quantisation (model dtype)
    kv_pool_model: torch.Tensor | None  # fp8 only: the pool before quantisation
    host: HostCopy | None = None      # host copies of the table and lengths (see ``host_copy``)
    out: torch.Tensor | None = None   # the output buffer the engine hands the kernel (``output_buffer``), set
    #                                   by the launch: a backend may write its out there or return its own
    notes: tuple = ()                 # lines for the row where the engine's writer, not the kernel, made these
    #                                   inputs unusual (``input_notes``)
    # layout split_q: the model-precision query (``q_model`` for fp8, else ``q``) in two parts as DeepSeek's
    # attention hands them to a kernel that takes q apart (``layouts.split_q``); None in every other layout
    q_nope: torch.Tensor | None = None  # (b, s_q, h_q, d_v)
    q_rope: torch.Tensor | None = None  # (b, s_q, h_q, d_qk - d_v)

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def batch_size(self) -> int:
        return self.q.shape[0]

    @property
    def s_q(self) -> int:
        return self.q.shape[1]

    @property
    def page_size(self) -> int:
        return self.kv_pool.shape[1]

    @property
    def num_pages(self) -> int:
        return self.kv_pool.shape[0]

    @property
    def model_dtype(self) -> torch.dtype:
        """The model's dtype: q's, or for fp8 cases the dtype q had before quantisation."""
        return (self.q if self.q_model is None else self.q_model).dtype

    @property
    def is_fp8(self) -> bool:
        return self.descale_k is not None


def host_copy(inputs: Inputs) -> HostCopy:
    """The block table and lengths of these inputs on the CPU: the copies made before they were sent,
    or read back from the device when the inputs were built some other way."""
    if inputs.host is not None and inputs.host.describes(inputs):
        return inputs.host
    return HostCopy(inputs.block_table.cpu(), inputs.cache_seqlens.cpu(), inputs.seq_lens.cpu(),
                    (inputs.block_table, inputs.cache_seqlens, inputs.seq_lens))


def key_sets(inputs: Inputs) -> KeySets:
    """What each query token reads, on the host (``reference.keysets``): the dense form, from the block
    table and lengths with the causal count.  (A sparse case's key sets are its index rows,
    ``SparseInputs.indices``: ``keysets.per_token``'s form.)"""
    host = host_copy(inputs)
    return keysets.dense(host.block_table.numpy(), host.cache_seqlens.tolist(), inputs.page_size, inputs.s_q,
                         inputs.causal)


def key_counts(inputs: Inputs) -> list[int]:
    """How many keys each request of ``key_sets`` has."""
    return host_copy(inputs).cache_seqlens.tolist()



def poisoned(shape, dtype, device) -> torch.Tensor:
    """A NaN-filled tensor inside NaN guard regions (``guards.guarded``), filled in place through its
    bits: no float32 copy of a pool of many GiB."""
    return guarded(shape, dtype, device, _nan_bits(dtype))


@lru_cache(maxsize=16)
def _nan_bits(dtype: torch.dtype) -> int:
    return int(as_bits(torch.tensor([float("nan")]).to(dtype))[0])


def output_buffer(inputs: "Inputs") -> torch.Tensor:
    """The output buffer an engine hands its attention kernel: ``(b, s_q, h_q, d_v)`` in the model dtype,
    poisoned, between guard regions, so a write past its end is seen (``integrity``)."""
    return poisoned((inputs.batch_size, inputs.s_q, inputs.q.shape[2], inputs.d_v), inputs.model_dtype,
                    inputs.device)

