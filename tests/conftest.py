"""Fixtures and settings shared by the whole suite."""

import os

from hypothesis import settings

pytest_plugins = ["tests.conftest_store"]

# CI draws the same examples on every run, so a landing never hangs on a lucky draw; a developer's
# plain `pytest` explores new ones each time (that is how the symlink-loop escape was found).
settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
