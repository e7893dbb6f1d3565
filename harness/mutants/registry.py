"""The mutant registry: each mutant is a TorchBackend subclass with one planted bug, dense or sparse alike.

``@mutant(name, bug, caught_by, needs)`` registers a class in ``MUTANTS``, the one registry ``selfcheck`` and
``--backend mutant:NAME`` read: ``bug`` is the real serving bug class it models, ``caught_by`` the
failed-check names (as in a result row's ``failed_checks``) of which at least one is expected to fire on the
selfcheck suite, and ``needs`` the cases its bug can show on (``NEEDS``): a dense mutant overrides a step of
the dense call (``run``), a sparse one a step of the sparse path (``run_sparse``), and passes every other case.
"""

from ..errors import InputError

MUTANTS: dict[str, type] = {}
NEEDS = {"dense": "dense cases (any scenario but sparse)", "sparse": "sparse cases (the sparse scenario)"}


def mutant(name: str, bug: str, caught_by: tuple[str, ...], needs: str = "dense"):
    if needs not in NEEDS:
        raise ValueError(f"mutant '{name}' needs '{needs}' (known: {', '.join(NEEDS)})")

    def register(cls):
        if name in MUTANTS:
            raise ValueError(f"mutant '{name}' registered twice")
        cls.name = f"mutant:{name}"
        cls.mutant_name, cls.bug, cls.caught_by, cls.needs = name, bug, tuple(caught_by), needs
        MUTANTS[name] = cls
        return cls
    return register


def meets(needs: str, case) -> bool:
    """Whether ``case`` is one a mutant that ``needs`` this can show its bug on."""
    return (case.scenario == "sparse") == (needs == "sparse")


def names(needs: str | None = None) -> list[str]:
    """Every mutant's name, the dense ones first (the kill matrix's order), or those that need ``needs``."""
    return [name for kind in NEEDS for name, cls in MUTANTS.items() if cls.needs == kind and needs in (None, kind)]


def load_mutant(name: str):
    """A fresh instance (mutants may carry state between calls, as the stale-metadata one does)."""
    if name not in MUTANTS:
        raise InputError(f"unknown mutant '{name}' (known: {', '.join(names())})")
    return MUTANTS[name]()
