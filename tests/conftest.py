"""Shared test setup: a derandomized hypothesis profile, so every run draws the same examples."""

import os

from harness.cores import passive_openmp

passive_openmp()      # before torch loads OpenMP, as the CLI does: its threads sleep when they wait

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", derandomize=True, max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(min(2, torch.get_num_threads()))

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none here)")
