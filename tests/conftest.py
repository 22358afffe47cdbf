"""Test configuration: hypothesis runs the same examples every time (CI must not be a lottery).

``HYPOTHESIS_PROFILE=explore`` draws fresh random examples on every run, to hunt for bugs.
"""

import contextlib
import os
import warnings

import pytest
from hypothesis import settings

settings.register_profile("default", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")


@pytest.fixture
def config_patch():
    """``config_patch(module, **values)`` sets torch configuration values for one test and restores them after it.

    It enters the configuration module's own ``patch``: ``monkeypatch.setattr`` cannot restore these values
    (they live outside the module's ``__dict__``, and some are aliases of another module's, such as
    ``force_disable_caches`` of ``torch.compiler.config``'s; newer pytest then deletes them on undo).
    """
    with contextlib.ExitStack() as patches:
        def patch(module, **values):
            patches.enter_context(module.patch(**values))

        yield patch


@pytest.fixture
def fresh_compiles():
    """Real compiles: every stage runs again (:func:`helpers.compiled_afresh`), dynamo reset (every result is in the
    session of its compile)."""
    import torch
    from helpers import compiled_afresh

    with compiled_afresh():
        torch._dynamo.reset()
        yield
        torch._dynamo.reset()


def pytest_collection_modifyitems(items):
    """Tests marked ``slow`` run first, each file's in its order. The suite runs on two workers that each take the
    next test as they free (``addopts`` in pyproject.toml): the long compiles then spread over both, and the short
    tests fill in at the end, instead of a compile of two minutes starting last on one worker while the other
    idles."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
