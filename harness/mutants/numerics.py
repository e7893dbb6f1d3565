"""Mutants with the right keys but wrong arithmetic: scales, LSE base, precision, empty rows."""

import math

import torch

from ..backends.torch_backend import TorchBackend
from .registry import mutant

_ONE = torch.ones(1)


@mutant("wrong_softmax_scale", "softmax scale 1/sqrt(576) (the full cached width) instead of 1/sqrt(192)",
        caught_by=("lse.element", "out.element"))
class WrongSoftmaxScale(TorchBackend):
    def scores(self, q, keys, scale):
        return super().scores(q, keys, q.shape[-1] ** -0.5)


@mutant("lse_base2", "LSE returned in base 2 (the kernel's exp2 domain) while declaring natural log",
        caught_by=("lse.element",))
class LseBase2(TorchBackend):
    def finalize(self, inputs, out, lse):
        out, lse = super().finalize(inputs, out, lse)
        return out, lse / math.log(2)


@mutant("no_descale_k", "fp8 KV cache read without multiplying by k_scale (descale_k dropped)",
        caught_by=("out.element", "lse.element"))
class NoDescaleK(TorchBackend):
    def read_keys(self, inputs, kv):
        return self.read(kv, _ONE)


@mutant("no_descale_q", "fp8 query read without multiplying by its scale (descale_q dropped)",
        caught_by=("out.element", "lse.element"))
class NoDescaleQ(TorchBackend):
    def load_q(self, inputs):
        return self.read(inputs.q, _ONE)


@mutant("bf16_accumulation", "output accumulator kept in bf16 across KV blocks: error grows with context length",
        caught_by=("out.cosine", "out.element"))
class Bf16Accumulation(TorchBackend):
    pages_per_split = 1   # one page per step, like the kernel's main loop over KV blocks

    def merge(self, out_a, lse_a, out_b, lse_b):
        out, lse = super().merge(out_a, lse_a, out_b, lse_b)
        return out.to(torch.bfloat16).float(), lse


@mutant("nan_empty_rows", "final 1/rowsum without the l == 0 guard: a request with no keys gives NaN, LSE -inf",
        caught_by=("out.nonfinite", "lse.nonfinite"))
class NanEmptyRows(TorchBackend):
    def finalize(self, inputs, out, lse):
        empty = torch.isposinf(lse).transpose(1, 2)[..., None]     # (b, s_q, h, 1), out's layout
        out = torch.where(empty, torch.full_like(out, math.nan), out)
        lse = torch.where(torch.isposinf(lse), torch.full_like(lse, -math.inf), lse)
        return super().finalize(inputs, out, lse)


@mutant("no_max_subtraction", "softmax as exp(s) / sum exp(s), without subtracting the running max: scores near "
        "88 overflow float32 (exp(88) * |v| > 3.4e38)", caught_by=("out.nonfinite", "lse.nonfinite", "out.element"))
class NoMaxSubtraction(TorchBackend):
    def partial(self, scores, mask, values):
        b, h_q, s_q, n = scores.shape
        h_kv = values.shape[2]
        p = torch.exp(torch.where(mask[:, None], scores, torch.full_like(scores, -math.inf)))
        total = p.sum(dim=-1)
        empty = total == 0                                    # no key: out 0, LSE +inf, as the clean split
        out = torch.einsum("bgjsn,bngd->bsgjd", p.view(b, h_kv, h_q // h_kv, s_q, n), values).flatten(2, 3)
        out = out / torch.where(empty, torch.ones_like(total), total).transpose(1, 2)[..., None]
        return out, torch.where(empty, torch.full_like(total, math.inf), torch.log(total))


@mutant("flush_subnormals", "subnormal inputs flushed to zero before the dot product (FTZ/DAZ loads): e4m3 "
        "subnormals (below 2^-6) read as 0", caught_by=("out.cosine", "out.element", "lse.element"))
class FlushSubnormals(TorchBackend):
    def read(self, x, descale):
        kept = super().read(x, descale)
        subnormal = x.float().abs() < torch.finfo(x.dtype).tiny          # NaN is not: poison stays poison
        return torch.where(subnormal, torch.zeros_like(kept), kept)
