"""Deliberately broken backends that prove the harness's checks can fail.

Each is the torch split-KV backend with one step overridden to plant one bug
class seen in real serving.  ``mla-verify selfcheck`` runs a suite against all of
them and the clean backend; ``--backend mutant:NAME`` runs one like any backend.
"""

from . import layout, masking, numerics, state, writes  # noqa: F401  (importing registers the mutants)
from .registry import MUTANTS, load_mutant, names

__all__ = ["MUTANTS", "load_mutant", "names"]
