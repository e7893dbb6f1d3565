"""Mutants whose bug lives between calls: run-to-run variation and stale metadata."""

import torch

from ..backends.torch_backend import TorchBackend
from .registry import mutant


@mutant("nondeterministic", "split count picked from runtime state (free SMs): identical calls reduce in "
        "different orders and differ in the last bits", caught_by=("determinism",))
class Nondeterministic(TorchBackend):
    def __init__(self):
        self.calls = 0

    def run(self, inputs):
        # alternate 8 and 4 pages per split; any request longer than 4 pages merges differently
        self.calls += 1
        self.pages_per_split = 8 if self.calls % 2 else 4
        return super().run(inputs)


@mutant("stale_seqlens", "scheduling metadata reused from the previous call: the kernel trusts its seq lens",
        caught_by=("out.element", "out.nonfinite", "lse.element", "lse.nonfinite", "raised"))
class StaleSeqlens(TorchBackend):
    def __init__(self):
        self.previous: torch.Tensor | None = None

    def kernel_seqlens(self, inputs):
        current = super().kernel_seqlens(inputs)
        stale = current.clone()
        if self.previous is not None:
            # the metadata buffer is sized for the largest batch; rows the last call filled stay stale
            n = min(len(stale), len(self.previous))
            stale[:n] = self.previous[:n].to(stale.device)
        self.previous = current.clone()
        return stale
