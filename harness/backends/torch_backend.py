"""A fast pure-PyTorch paged MLA kernel, written the way split-KV kernels work.

It walks the block table a few pages at a time across the whole batch (like
flash-decoding's KV splits), computes each split's partial attention in float32,
and merges the partials by their LSE.  It runs on CPU and GPU, is the fallback
when no real kernel is available, and is the base the mutants are built on: each
step is a small method a mutant can override to plant one bug.
"""

import math

import torch

from reference import dequantize_fp8, descale_scalar, is_fp8, merge_attention

from ..building.pool import pages_for
from ..planning.case import LAYOUTS
from .base import Backend, Capabilities, Feature, Unsupported
from .torch_sparse import SPARSE_SUPPORT, TorchSparse


class TorchBackend(TorchSparse, Backend):   # TorchSparse: run_sparse, the sparse scenario's path
    name = "torch"
    capabilities = Capabilities(sparse=SPARSE_SUPPORT, layouts=LAYOUTS)
    features = frozenset({Feature.DENSE, Feature.SPARSE})
    packages = (("torch", "torch"),)
    install = "make setup"
    pages_per_split = 8
    # the keys a split holds at DeepSeek's 64-token pages: the size estimate counts every case at this,
    # whatever its page size, as it always has (chunk plans rest on it)
    estimated_split_keys = pages_per_split * 64
    accumulate_dtype = torch.float32

    def info(self):
        return {"package": "torch", "version": torch.__version__, "api": "split-KV pure PyTorch"}

    # ---- steps a mutant may override ------------------------------------------------
    def kernel_seqlens(self, inputs) -> torch.Tensor:
        """The per-request key counts the kernel trusts (FlashMLA's ``cache_seqlens``)."""
        return inputs.cache_seqlens.long()

    def load_q(self, inputs) -> torch.Tensor:
        return self.read(self.whole_q(inputs), inputs.descale_q)

    def whole_q(self, inputs) -> torch.Tensor:
        """q as one tensor; in layout ``split_q``, its two parts joined.  Those are the model's query, and an
        fp8 case's q reaches this kernel quantised whole (``fp8_q``), so that pair is refused."""
        if inputs.q_nope is None:
            return inputs.q
        if inputs.is_fp8:
            raise Unsupported("layout split_q with fp8: this kernel takes q quantised whole with K's scale "
                              "(fp8_q quantized_k_scale), and split_q's parts are the model-precision query")
        return torch.cat([inputs.q_nope, inputs.q_rope], dim=-1)

    def read(self, x, descale) -> torch.Tensor:
        if is_fp8(x.dtype):
            return dequantize_fp8(x, descale_scalar(descale), torch.float32)
        return x.float()

    def read_keys(self, inputs, kv) -> torch.Tensor:
        """Cached tokens as the kernel reads them (fp8: dequantised with ``descale_k``)."""
        return self.read(kv, inputs.descale_k)

    def block_table(self, inputs) -> torch.Tensor:
        return inputs.block_table.long()

    def gather_pages(self, inputs, table, seq, p0, p1):
        """Keys of pages ``p0 .. p1`` of every request, ``(b, n, h_kv, d)``, and which are real tokens."""
        P = inputs.kv_pool.shape[1]
        pages = torch.arange(p0, p1, device=table.device)
        n_pages = pages_for(seq, P)
        real_page = pages[None, :] < n_pages[:, None]                       # (b, c)
        kv = inputs.kv_pool[self.page_ids(table[:, p0:p1], real_page)]      # (b, c, P, h_kv, d)
        kv = kv.flatten(1, 2)
        pos = p0 * P + torch.arange(kv.shape[1], device=kv.device)
        in_seq = pos[None, :] < seq[:, None]
        return self.read_keys(inputs, kv), in_seq, pos

    def page_ids(self, entries, real_page) -> torch.Tensor:
        """Pages to load: entries past a request's last page are padding and never dereferenced."""
        return torch.where(real_page, entries, torch.zeros_like(entries))

    def clear_outside(self, keys, in_seq) -> torch.Tensor:
        """Select zeros outside the sequence, so poison (NaN) there cannot reach the output."""
        return torch.where(in_seq[:, :, None, None], keys, torch.zeros_like(keys))

    def visible(self, pos, seq, s_q, causal) -> torch.Tensor:
        """``(b, s_q, n)``: query token i sees positions ``<= seq - s_q + i`` (bottom-right causal)."""
        if not causal:
            return (pos[None, None, :] < seq[:, None, None]).expand(-1, s_q, -1)
        i = torch.arange(s_q, device=pos.device)
        last = seq[:, None] - s_q + i[None, :]                              # (b, s_q)
        return pos[None, None, :] <= last[:, :, None]

    def scores(self, q, keys, scale) -> torch.Tensor:
        """``(b, h_q, s_q, n)`` logits; query heads share their kv head in groups."""
        b, s_q, h_q, d = q.shape
        h_kv = keys.shape[2]
        qg = q.view(b, s_q, h_kv, h_q // h_kv, d)
        return torch.einsum("bsgjd,bngd->bgjsn", qg, keys).flatten(1, 2) * scale

    def values(self, keys, d_v) -> torch.Tensor:
        return keys[..., :d_v]

    def partial(self, scores, mask, values):
        """One split's attention, normalised over its own keys, and its LSE (+inf if empty)."""
        b, h_q, s_q, n = scores.shape
        h_kv = values.shape[2]
        scores = torch.where(mask[:, None], scores, torch.full_like(scores, -math.inf))
        lse = torch.logsumexp(scores, dim=-1)
        empty = torch.isneginf(lse)
        p = self.weights(torch.exp(scores - torch.where(empty, torch.zeros_like(lse), lse)[..., None]))
        p = p.view(b, h_kv, h_q // h_kv, s_q, n).to(self.accumulate_dtype)
        out = torch.einsum("bgjsn,bngd->bsgjd", p, values.to(self.accumulate_dtype)).flatten(2, 3)
        return out.float(), torch.where(empty, torch.full_like(lse, math.inf), lse)

    def weights(self, p):
        """The softmax weights as the P.V product takes them: as computed here (a kernel may round them)."""
        return p

    def merge(self, out_a, lse_a, out_b, lse_b):
        # partial outs are (b, s_q, h, d_v) and LSEs (b, h, s_q): align them for the merge
        out, lse = merge_attention(out_a.transpose(1, 2), lse_a, out_b.transpose(1, 2), lse_b)
        return out.transpose(1, 2), lse

    @classmethod
    def split_bytes(cls, requests: int, longest: int, token_elements: int) -> int:
        """The size estimate's bytes of one split (``resources``): keys, scores and values of every request
        in ``accumulate_dtype``, ``estimated_split_keys`` keys (or the longest request's, if fewer) at a time."""
        return requests * min(longest, cls.estimated_split_keys) * token_elements * cls.accumulate_dtype.itemsize * 3

    def finalize(self, inputs, out, lse):
        """Out in the model dtype, written into the engine's output buffer where the harness gives one."""
        if inputs.out is None or inputs.out.shape != out.shape:
            return out.to(inputs.model_dtype), lse.float()
        return inputs.out.copy_(out), lse.float()

    # ---- the kernel --------------------------------------------------------------------
    def run(self, inputs):
        q = self.load_q(inputs)
        b, s_q, h_q, _ = q.shape
        d_v = inputs.d_v
        seq = self.kernel_seqlens(inputs)
        table = self.block_table(inputs)
        out = torch.zeros(b, s_q, h_q, d_v, device=q.device)
        lse = torch.full((b, h_q, s_q), math.inf, device=q.device)
        # walk only the columns some request needs, as a kernel's loop over KV blocks does, so
        # extra padding columns in a wider table change nothing (not even the rounding)
        P = inputs.kv_pool.shape[1]
        n_cols = min(table.shape[1], int(pages_for(seq.max(), P))) if b else 0
        for p0 in range(0, n_cols, self.pages_per_split):
            p1 = min(n_cols, p0 + self.pages_per_split)
            keys, in_seq, pos = self.gather_pages(inputs, table, seq, p0, p1)
            keys = self.clear_outside(keys, in_seq)
            mask = self.visible(pos, seq, s_q, inputs.causal) & in_seq[:, None, :]
            part = self.partial(self.scores(q, keys, inputs.softmax_scale), mask, self.values(keys, d_v))
            out, lse = self.merge(out, lse, *part)
        return self.finalize(inputs, out, lse)
