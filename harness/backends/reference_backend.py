"""The oracle itself as a backend: float64, no rounding.  A baseline, and a check of the harness."""

from ..oracle import expected
from .base import Backend


class ReferenceBackend(Backend):
    name = "reference"

    def info(self):
        return {"package": "mla-verify", "version": None, "api": "reference.mla_attention_batched"}

    def run(self, inputs):
        return expected(inputs)
