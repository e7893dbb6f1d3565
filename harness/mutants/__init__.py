"""Deliberately broken backends that prove the harness's checks can fail.

Each is the torch split-KV backend (the sparse ones: its sparse path) with one step overridden to plant one bug
class seen in real serving, registered in one registry (``MUTANTS``) with the cases it needs, dense or
sparse.  ``mla-verify selfcheck`` runs a suite against all of them and the clean backend; ``--backend
mutant:NAME`` runs one like any backend.
"""

from . import layout, masking, numerics, second_cache, sparse, state, writes  # noqa: F401  (importing registers the mutants)
from .registry import MUTANTS, NEEDS, load_mutant, meets, names

__all__ = ["MUTANTS", "NEEDS", "load_mutant", "meets", "names"]
