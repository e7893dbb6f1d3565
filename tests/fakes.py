"""Stand-ins the tests share.

- ``FakeWorker``: a worker as ``isolation.hand_out`` and ``placement`` see it (its state, chunk, cache and
  worker set), recording what it is told instead of sending it to a process.
- ``RoundsWeights``: the torch backend rounding its softmax weights before P.V, dense and sparse alike, as a
  kernel does that the error model's weight-rounding look allows for.
"""

import torch

from harness.backends import TorchBackend
from harness.running.worker import State, WorkerState
from harness.running.worker_process import EMPTY_CACHE


class FakeWorker(WorkerState):
    """Busy with ``chunk`` when given one, else holding ``cache`` bytes (CACHED) or nothing (IDLE);
    ``place``: its worker set (None: the only one).  ``told`` lists its messages: a chunk, "empty" or "retire"."""

    def __init__(self, place=None, cache=0, chunk=None, holds=0):
        super().__init__(place)
        self.told = []
        self.cache, self.chunk, self.holds = cache, chunk, holds
        self.state = State.BUSY if chunk is not None else State.CACHED if cache else State.IDLE

    def post(self, message):
        self.told.append("retire" if message is None else "empty" if message == EMPTY_CACHE else message)


class RoundsWeights(TorchBackend):
    """The torch backend with its softmax weights rounded to ``dtype`` before the P.V product."""

    name = "rounds-weights"

    def __init__(self, dtype=torch.bfloat16):
        super().__init__()
        self.dtype = dtype

    def weights(self, p):
        return p.to(self.dtype).float()
