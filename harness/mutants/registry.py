"""The mutant registry: each mutant is a TorchBackend subclass with one planted bug.

``@mutant(name, bug, caught_by)`` registers a class: ``bug`` is the real serving
bug class it models, ``caught_by`` the failed-check names (as in a result row's
``failed_checks``) of which at least one is expected to fire on the selfcheck suite.
"""

from ..errors import InputError

MUTANTS: dict[str, type] = {}


def mutant(name: str, bug: str, caught_by: tuple[str, ...]):
    def register(cls):
        if name in MUTANTS:
            raise ValueError(f"mutant '{name}' registered twice")
        cls.name = f"mutant:{name}"
        cls.mutant_name, cls.bug, cls.caught_by = name, bug, tuple(caught_by)
        MUTANTS[name] = cls
        return cls
    return register


def names() -> list[str]:
    return list(MUTANTS)


def load_mutant(name: str):
    """A fresh instance (mutants may carry state between calls, as the stale-metadata one does)."""
    if name not in MUTANTS:
        raise InputError(f"unknown mutant '{name}' (known: {', '.join(MUTANTS)})")
    return MUTANTS[name]()
