"""Running the `delegate` CLI from tests: its command line, and an environment with none of the
developer's provider keys or delegate settings (so no test can reach a real model by accident)."""

from __future__ import annotations

import os
import sys

SCRUBBED = ("OPENAI_", "ANTHROPIC_", "DELEGATE_")
"""Prefixes of the variables a CLI under test never inherits."""


def scrubbed_env(*also: str) -> dict[str, str]:
    """This process's environment without `SCRUBBED` variables (nor those starting with `also`)."""
    drop = (*SCRUBBED, *also)
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def delegate(*args: str) -> list[str]:
    """The command line of `delegate ARGS...` run by this interpreter."""
    return [sys.executable, "-m", "delegate", *args]
