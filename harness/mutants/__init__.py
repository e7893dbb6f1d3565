"""Deliberately broken backends that prove the harness's checks can fail.

Each is the torch split-KV backend (the sparse ones: its sparse path) with one step overridden to plant one bug
class seen in real serving.  ``mla-verify selfcheck`` runs a suite against all of
them and the clean backend; ``--backend mutant:NAME`` runs one like any backend.
"""

from . import layout, masking, numerics, state, writes  # noqa: F401  (importing registers the mutants)
from .registry import MUTANTS, load_mutant, mutant, names
from .sparse import SPARSE_MUTANTS

# Registered here, not in sparse.py: that file also loads as a plug-in (path.py:NAME), a second import.
for _name, _cls in SPARSE_MUTANTS.items():
    mutant(_name, _cls.bug, _cls.caught_by)(_cls)

__all__ = ["MUTANTS", "load_mutant", "names"]
