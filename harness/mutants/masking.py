"""Mutants that attend to the wrong set of keys: causal offsets, page counts, lengths."""

from ..backends.torch_backend import TorchBackend
from .registry import mutant


@mutant("causal_plus_one", "verify mask offset off by one: draft token i also sees draft token i+1",
        caught_by=("out.element", "lse.element"))
class CausalPlusOne(TorchBackend):
    def visible(self, pos, seq, s_q, causal):
        # decode (s_q = 1) takes a path without the offset arithmetic, so only verify breaks
        return super().visible(pos, seq + 1 if s_q > 1 else seq, s_q, causal)


@mutant("causal_minus_one", "verify mask offset off by one: draft token i misses its own key",
        caught_by=("out.element", "lse.element"))
class CausalMinusOne(TorchBackend):
    def visible(self, pos, seq, s_q, causal):
        return super().visible(pos, seq - 1 if s_q > 1 else seq, s_q, causal)


@mutant("no_causal_mask", "verify called with causal=False: every draft token sees all drafts",
        caught_by=("out.element", "lse.element"))
class NoCausalMask(TorchBackend):
    def visible(self, pos, seq, s_q, causal):
        return super().visible(pos, seq, s_q, causal and s_q == 1)


@mutant("drop_partial_page", "KV block count computed as seq_len // page_size: the partial last page is skipped",
        caught_by=("out.element", "lse.element", "lse.nonfinite"))
class DropPartialPage(TorchBackend):
    def gather_pages(self, inputs, table, seq, p0, p1):
        P = inputs.kv_pool.shape[1]
        return super().gather_pages(inputs, table, seq // P * P, p0, p1)


@mutant("read_past_seqlen", "length passed as seq_len + 1: one slot past the end (stale or poisoned) is read",
        caught_by=("out.nonfinite", "out.element", "raised"))
class ReadPastSeqlen(TorchBackend):
    def kernel_seqlens(self, inputs):
        return super().kernel_seqlens(inputs) + 1


@mutant("mask_by_multiply", "slots past the seq len masked by multiplying with 0, not selected out: "
        "NaN garbage in the last page's tail leaks in (0 * NaN)", caught_by=("out.nonfinite",))
class MaskByMultiply(TorchBackend):
    def clear_outside(self, keys, in_seq):
        return keys * in_seq[:, :, None, None].to(keys.dtype)
