"""Sparse mutants: the torch backend's sparse path (``backends/torch_sparse.py``) with one bug planted.

Registered in ``MUTANTS`` as every mutant is, each declaring ``needs="sparse"``: ``selfcheck`` runs them on
its ``sparse`` group (cases/selfcheck.toml), and each is also killed by the ``sparse`` suite
(tests/mutants/test_sparse_mutants.py).  Any runs as a backend: ``--backend mutant:sink_ignored``.  The dense
mutants pass sparse cases as the clean backend does (they override dense steps only), and these pass dense
cases.
"""

import torch

from ..backends.torch_backend import TorchBackend
from .registry import mutant


@mutant("minus_one_as_slot_zero",
        "-1 entries clamped to slot 0 and attended (slot 0 is SGLang's reserved padding slot)",
        caught_by=("out.nonfinite", "lse.nonfinite", "out.element"), needs="sparse")
class MinusOneAsSlotZero(TorchBackend):
    def sparse_valid(self, indices):
        return torch.ones_like(indices, dtype=torch.bool)

    def sparse_keys(self, inputs, slots):
        return super().sparse_keys(inputs, slots.clamp_min(0))


@mutant("sink_ignored", "attn_sink not applied (the kernel called without it)",
        caught_by=("out.element", "out.cosine"), needs="sparse")
class SinkIgnored(TorchBackend):
    def sparse_sink(self, out, lse, sink):
        return out


@mutant("sink_in_lse", "the returned LSE includes the sink (FlashMLA's excludes it)",
        caught_by=("lse.element", "lse.nonfinite"), needs="sparse")
class SinkInLse(TorchBackend):
    def sparse_sink(self, out, lse, sink):
        scaled = super().sparse_sink(out, lse, sink)
        if sink is not None:
            lse.copy_(torch.logaddexp(lse, sink.float()[None, :]))      # in place: the LSE returned
        return scaled


@mutant("wrong_scale_tile", "each 128-value tile dequantized with its neighbour's scale",
        caught_by=("out.element", "lse.element"), needs="sparse")
class WrongScaleTile(TorchBackend):
    def sparse_records(self, inputs, slots):
        values, scales, rope = super().sparse_records(inputs, slots)
        return values, scales.roll(1, dims=1), rope


@mutant("rope_as_fp8", "the 64 rope values read as e4m3 bytes instead of bf16",
        caught_by=("lse.element", "out.element"), needs="sparse")
class RopeAsFp8(TorchBackend):
    def sparse_records(self, inputs, slots):
        values, scales, rope = super().sparse_records(inputs, slots)
        as_bytes = rope.to(torch.bfloat16).view(torch.uint8)[:, :rope.shape[1]]
        return values, scales, as_bytes.view(torch.float8_e4m3fn).float().nan_to_num(0.0)


@mutant("page_offset_plus_one",
        "slot read one past its offset in the page (page * P + offset + 1, wrapping in the page)",
        caught_by=("out.nonfinite", "lse.nonfinite", "out.element", "lse.element"), needs="sparse")
class PageOffsetPlusOne(TorchBackend):
    def sparse_keys(self, inputs, slots):
        P = inputs.page_size
        return super().sparse_keys(inputs, slots // P * P + (slots % P + 1) % P)


@mutant("repeated_merged", "a slot listed twice attended once (indices de-duplicated)",
        caught_by=("lse.element", "out.element"), needs="sparse")
class RepeatedMerged(TorchBackend):
    def sparse_valid(self, indices):
        same = indices[:, :, None] == indices[:, None, :]
        earlier = torch.ones(indices.shape[1], indices.shape[1], dtype=torch.bool, device=indices.device).tril(-1)
        repeat = (same & earlier).any(dim=-1)                       # listed before in the same row
        return (indices != -1) & ~repeat
