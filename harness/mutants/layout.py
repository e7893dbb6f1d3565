"""Mutants that read the right arithmetic from the wrong place: dims, heads, table rows, strides."""

import torch

from ..backends.torch_backend import TorchBackend
from .registry import mutant

ROPE_DIMS = 64   # DeepSeek's qk_rope_head_dim, the tail of each cached 576-wide token


@mutant("v_wrong_dims", "V taken from the last d_v dims (rope-first layout) instead of the first d_v",
        caught_by=("out.element",))
class VWrongDims(TorchBackend):
    def values(self, keys, d_v):
        return keys[..., keys.shape[-1] - d_v:]


@mutant("rope_ignored", "QK product over the 512 latent dims only: the 64 rope dims never enter the logits",
        caught_by=("lse.element", "out.element"))
class RopeIgnored(TorchBackend):
    def scores(self, q, keys, scale):
        return super().scores(q[..., :-ROPE_DIMS].contiguous(), keys[..., :-ROPE_DIMS], scale)


@mutant("swapped_table_rows", "two requests' block-table rows swapped (batch reordered, req_pool_indices not)",
        caught_by=("out.element", "out.nonfinite", "lse.element", "raised"))
class SwappedTableRows(TorchBackend):
    def block_table(self, inputs):
        table = super().block_table(inputs)
        if table.shape[0] < 2:
            return table
        return table[[1, 0, *range(2, table.shape[0])]]


@mutant("head_query_mixup", "head stride off by one in the last head: it attends with its neighbour's query",
        caught_by=("out.element", "lse.element"))
class HeadQueryMixup(TorchBackend):
    def load_q(self, inputs):
        q = super().load_q(inputs)
        if q.shape[2] < 2:
            return q
        q = q.clone()
        q[:, :, -1] = q[:, :, -2]
        return q


@mutant("unwritten_heads", "output store stops one head tile early: the last h/8 heads keep the buffer's zeros",
        caught_by=("out.element",))
class UnwrittenHeads(TorchBackend):
    def finalize(self, inputs, out, lse):
        out = out.clone()
        out[:, :, out.shape[2] - max(1, out.shape[2] // 8):] = 0.0
        return super().finalize(inputs, out, lse)


@mutant("loads_padded_pages", "block-table padding dereferenced (pages past the last one are loaded, then "
        "masked): harmless with -1 or 1, an out-of-range access with other padding",
        caught_by=("raised", "padding"))
class LoadsPaddedPages(TorchBackend):
    def page_ids(self, entries, real_page):
        return entries


@mutant("page_id_16bit", "page ids kept in 16 bits: a page past 65,535 is read from page id & 0xFFFF "
        "(the class of FlashInfer #3130's offset overflow, at page-id width)",
        caught_by=("out.nonfinite", "out.element", "lse.element", "lse.nonfinite"))
class PageId16Bit(TorchBackend):
    def block_table(self, inputs):
        return super().block_table(inputs) & 0xFFFF


@mutant("contiguous_q", "q read with the contiguous strides of its shape from its storage: a q handed as a view "
        "into a larger buffer (a strided slice) is read from the wrong places",
        caught_by=("out.nonfinite", "lse.nonfinite", "out.element", "lse.element"))
class ContiguousQ(TorchBackend):
    def load_q(self, inputs):
        return self.read(packed(inputs.q), inputs.descale_q)


def packed(t: torch.Tensor) -> torch.Tensor:
    """``t``'s storage read from its start with the contiguous strides of its shape."""
    strides = [1]
    for n in reversed(t.shape[1:]):
        strides.insert(0, strides[0] * n)
    return torch.as_strided(t, t.shape, strides, t.storage_offset())


@mutant("split_q_packed", "q's nope and rope parts read as if each were packed: nope, whose heads lie outermost "
        "(the absorbed bmm's output), read token-major, and rope read past its rows' 128 projected nope values",
        caught_by=("out.nonfinite", "lse.nonfinite", "out.element", "lse.element"))
class SplitQPacked(TorchBackend):
    def whole_q(self, inputs):
        if inputs.q_nope is None:
            return super().whole_q(inputs)
        return torch.cat([packed(inputs.q_nope), packed(inputs.q_rope)], dim=-1)
