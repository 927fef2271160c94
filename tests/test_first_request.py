"""The first model call of a process is timed as the model's: the provider's SDK is imported and
its certificates loaded when the model is built, before the clock of the first request starts; a
missing key is said before any SDK is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_anthropic import AnthropicServer
from tests.loopback_anthropic import Reply as AnthropicReply
from tests.loopback_openai import OpenAIServer, Reply


def first_call_seconds(events: list[dict[str, Any]]) -> float:
    """The recorded time of the run's first model call: its `model.response` less its `model.request`."""
    asked = next(e for e in events if e["type"] == "model.request")
    answered = next(e for e in events if e["type"] == "model.response")
    return answered["ts"] - asked["ts"]  # seconds since the epoch


def recorded_events(workspace: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    listed = run_cli(["runs", "events", "--json", "-w", str(workspace)], env=env)
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


def test_the_first_openai_call_of_a_process_is_recorded_as_the_models_time_alone(tmp_path: Path) -> None:
    """An instant loopback model: what the events record for the first call is the call (well under
    100 ms), not the SDK's import and client set-up (a second or more)."""
    with OpenAIServer(lambda body: Reply(content="Hi.")) as server:
        env = scrubbed_env() | {"OPENAI_BASE_URL": server.base_url}
        done = run_cli(["run", "Say hi.", "--model", "openai:gpt-4.1-mini", "-w", str(tmp_path)], env=env)
        assert done.returncode == 0, done.stderr
        assert first_call_seconds(recorded_events(tmp_path, env)) < 0.1


def test_the_first_anthropic_call_of_a_process_is_recorded_as_the_models_time_alone(tmp_path: Path) -> None:
    with AnthropicServer(lambda body: AnthropicReply("Hi.")) as server:
        env = scrubbed_env() | {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.base_url}
        done = run_cli(["run", "Say hi.", "--model", "anthropic:claude-sonnet-4-5", "-w", str(tmp_path)], env=env)
        assert done.returncode == 0, done.stderr
        assert first_call_seconds(recorded_events(tmp_path, env)) < 0.1


@pytest.mark.parametrize("spec", ["anthropic:claude-sonnet-4-5", "openai:gpt-4.1-mini"])
def test_a_missing_key_is_said_before_the_providers_sdk_is_imported(spec: str) -> None:
    code = (
        "import sys\n"
        "from delegate import UserError\n"
        "from delegate.models import resolve_model\n"
        "try:\n"
        f"    resolve_model({spec!r})\n"
        "except UserError as exc:\n"
        "    print(exc)\n"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=scrubbed_env(), capture_output=True, text=True, timeout=60)
    said, imported = done.stdout.splitlines()
    assert "needs an API key" in said
    assert imported == "[]"
