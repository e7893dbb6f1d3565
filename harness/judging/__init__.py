"""Judging answers: the oracle, conventions, comparison, tolerances, checks and the witness."""
