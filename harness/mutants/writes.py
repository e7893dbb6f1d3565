"""Mutants that write where a kernel must not: into its inputs, or past its output.

Each computes the right answer, so no comparison with the oracle can see it; only the input witness
(``harness/judging/integrity.py``) can.  In an engine each corrupts state that later steps read.
"""

import torch

from ..backends.torch_backend import TorchBackend
from .registry import mutant


@mutant("scales_q_in_place", "an in-place rope or quantisation of q: the engine's q buffer is changed under it "
        "(the kernel's own answer, computed before the write, is right)", caught_by=("inputs.unchanged",))
class ScalesQInPlace(TorchBackend):
    def run(self, inputs):
        answer = super().run(inputs)
        inputs.q.copy_((inputs.q.float() * 2).to(inputs.q.dtype))     # fp8 has no in-place multiply
        return answer


@mutant("writes_other_page", "a stray store into the KV page of another request (or a free page): the cache "
        "that request reads next step is corrupted", caught_by=("inputs.unchanged",))
class WritesOtherPage(TorchBackend):
    def run(self, inputs):
        answer = super().run(inputs)
        # the pool's last page: another request's, or a free one, either way not this call's to write
        inputs.kv_pool[-1, 0].copy_(inputs.kv_pool[-1, 0].float().nan_to_num(0.0).add(1.0).to(inputs.kv_pool.dtype))
        return answer


@mutant("writes_past_out", "an off-by-one tile store: the kernel writes one row past the end of the output "
        "buffer the engine handed it", caught_by=("inputs.unchanged",))
class WritesPastOut(TorchBackend):
    def run(self, inputs):
        out, lse = super().run(inputs)
        if inputs.out is not None:
            # the row after the buffer's last one: where the next tensor of an engine's arena would start
            row = inputs.out.shape[-1]
            past = torch.as_strided(inputs.out, (row,), (1,), inputs.out.storage_offset() + inputs.out.numel())
            past.zero_()
        return out, lse
