"""DeepSeek V4 mutants: the torch backend's sparse path with one bug in how it reads the second cache or a
row's lengths (``backends/torch_sparse.py``'s scope steps).  Each ``needs="sparse"``; ``selfcheck`` meets them
on its ``sparse-v4`` group (cases/selfcheck.toml: lengths drawn as FlashMLA's tests draw them, past which every
slot is poisoned, and an extra cache with its own page size).
"""

import dataclasses

import torch

from ..backends.torch_backend import TorchBackend
from .registry import mutant

NONFINITE_OR_WRONG = ("out.nonfinite", "lse.nonfinite", "out.element", "lse.element")


@mutant("topk_length_ignored", "topk_length not honoured: every main entry read, past the length too",
        caught_by=NONFINITE_OR_WRONG, needs="sparse")
class TopkLengthIgnored(TorchBackend):
    def sparse_main_length(self, inputs):
        return None


@mutant("extra_topk_length_ignored", "extra_topk_length not honoured: every extra entry read",
        caught_by=NONFINITE_OR_WRONG, needs="sparse")
class ExtraTopkLengthIgnored(TorchBackend):
    def sparse_extra_length(self, inputs):
        return None


@mutant("extra_page_size_from_main", "the extra cache's slots split into pages of the main cache's page size",
        caught_by=NONFINITE_OR_WRONG, needs="sparse")
class ExtraPageSizeFromMain(TorchBackend):
    def sparse_scopes(self, inputs):
        scopes = super().sparse_scopes(inputs)
        if len(scopes) < 2:
            return scopes
        main, extra = scopes
        # slot s read as page s // P_main, offset s % P_main of the extra pool (its own page stride kept)
        P, E = main.page_size, extra.page_size
        idx = extra.indices.long()
        moved = (idx // P) * E + (idx % P) % E
        moved = torch.where(idx >= 0, moved.clamp(0, extra.kv_pool.shape[0] * E - 1), idx)
        return [main, dataclasses.replace(extra, indices=moved.to(torch.int32))]


@mutant("softmax_per_cache", "a softmax per cache, the two outputs averaged without their LSEs",
        caught_by=("out.element", "out.cosine"), needs="sparse")
class SoftmaxPerCache(TorchBackend):
    def sparse_attend_scopes(self, q, parts, scale, d_v):
        if len(parts) < 2:
            return super().sparse_attend_scopes(q, parts, scale, d_v)
        answers = [self.sparse_attend(q, keys, valid, scale, d_v) for keys, valid in parts]
        out = sum(o for o, _ in answers) / len(answers)
        lse = torch.logsumexp(torch.stack([torch.where(torch.isposinf(l_), -torch.inf, l_) for _, l_ in answers]), 0)
        return out, torch.where(torch.isneginf(lse), torch.inf, lse)


@mutant("extra_cache_dropped", "the extra cache not read: the compressed keys left out of the softmax",
        caught_by=("out.element", "lse.element", "out.cosine"), needs="sparse")
class ExtraCacheDropped(TorchBackend):
    def sparse_scopes(self, inputs):
        return super().sparse_scopes(inputs)[:1]
