"""Running the `delegate` CLI from tests: its command line, and an environment with none of the
developer's provider keys or delegate settings (so no test can reach a real model by accident)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SCRUBBED = ("OPENAI_", "ANTHROPIC_", "DELEGATE_")
"""Prefixes of the variables a CLI under test never inherits."""


NO_USER_LEVEL = "/nonexistent/.claude"
"""The CLI's `~/.claude` under test (`CLAUDE_CONFIG_DIR`): none, so the developer's own agents and
skills never reach a test's run."""


def scrubbed_env(*also: str) -> dict[str, str]:
    """This process's environment without `SCRUBBED` variables (nor those starting with `also`),
    and without the developer's `~/.claude` (see `NO_USER_LEVEL`)."""
    drop = (*SCRUBBED, *also)
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)} | {"CLAUDE_CONFIG_DIR": NO_USER_LEVEL}


def delegate(*args: str | bytes) -> list[str | bytes]:
    """The command line of `delegate ARGS...` run by this interpreter."""
    return [sys.executable, "-m", "delegate", *args]


def run_cli(
    args: Sequence[str | bytes], env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `delegate ARGS...` to its end, its output captured as text, in `env` (default: this
    process's, scrubbed)."""
    return subprocess.run(
        delegate(*args),
        cwd=cwd,
        env=scrubbed_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
