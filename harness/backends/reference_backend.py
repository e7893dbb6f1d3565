"""The oracle itself as a backend: float64, no rounding.  A baseline, and a check of the harness."""

from ..judging.oracle import expected
from .base import Backend, Capabilities, Feature


class ReferenceBackend(Backend):
    name = "reference"
    # the oracle itself, unrounded: no engine consumes it, so it declares float64 outputs
    capabilities = Capabilities(out_dtype="float64", lse_dtype="float64", engine="none (the oracle)")
    features = frozenset({Feature.DENSE})
    packages = (("reference", "mla-verify"),)
    install = "make setup  (part of this repository)"

    def info(self):
        return {"package": "mla-verify", "version": None, "api": "reference.mla_attention_batched"}

    def run(self, inputs):
        return expected(inputs)
