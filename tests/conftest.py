"""Fixtures and settings shared by the whole suite."""

import os

import pytest
from hypothesis import settings

pytest_plugins = ["tests.conftest_store", "tests.durable_support"]

# CI draws the same examples on every run, so a landing never hangs on a lucky draw; a developer's
# plain `pytest` explores new ones each time (that is how the symlink-loop escape was found).
settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider key nor model setting of the developer's reaches the test's own process (the
    CLI under test gets `tests.cli_support.scrubbed_env()`)."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_")) or name in (
            "DELEGATE_MODEL",
            "DELEGATE_MODEL_ALIASES",
            "DELEGATE_DB",
        ):
            monkeypatch.delenv(name)
