"""Test configuration: hypothesis runs the same examples every time (CI must not be a lottery).

``HYPOTHESIS_PROFILE=explore`` draws fresh random examples on every run, to hunt for bugs.
"""

import os
import warnings

import pytest
from hypothesis import settings

settings.register_profile("default", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")


@pytest.fixture
def fresh_compiles(monkeypatch):
    """Real compiles: Inductor's caches off, dynamo reset (every result is in the session of its compile)."""
    import torch
    import torch._inductor.config as config

    monkeypatch.setattr(config, "force_disable_caches", True)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
