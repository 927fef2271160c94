"""The suite's own guards (`tests/conftest.py`), seen from tests that would break them: one pytest
of their own, with the same conftest fixtures, whose report the tests here read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.conftest import clean_env, models_on_loopback_only  # noqa: F401
"""

BREAKERS = """
import asyncio, os, subprocess, sys
from delegate import Message
from delegate.models import AnthropicModel, ModelRequest, OpenAIModel, RetryPolicy

ONCE = RetryPolicy(attempts=1)  # a refused connection is not tried again for seconds

def ask(model):
    try:
        asyncio.run(model.complete(ModelRequest(system="", messages=[Message.user("hi")])))
    except BaseException:
        pass  # a test that expects an error would swallow the refusal

def test_openai_with_its_own_service():
    ask(OpenAIModel("gpt-4o", api_key="k", retry=ONCE))

def test_anthropic_at_a_remote_base_url():
    ask(AnthropicModel("claude-sonnet-4-5", api_key="k", base_url="https://llm.example.com", retry=ONCE))

def test_openai_on_loopback():
    ask(OpenAIModel("m", api_key="k", base_url="http://127.0.0.1:9/v1", retry=ONCE))

def test_a_cli_with_a_key_and_no_base_url():
    try:
        subprocess.run([sys.executable, "-c", "pass"], env={"OPENAI_API_KEY": "k"})
    except BaseException:
        pass

def test_a_cli_on_a_loopback_server():
    env = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://localhost:9/v1"}
    assert subprocess.run([sys.executable, "-c", "pass"], env=env).returncode == 0

def test_the_environment():
    names = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "DELEGATE_MODEL", "DELEGATE_DB")
    assert [n for n in names if n in os.environ] == []
    assert os.environ["DELEGATE_TEST_SWITCH"] == "kept"
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each breaker's outcome (`passed`, `failed`, `error` at teardown) and the run's whole output."""
    folder = tmp_path_factory.mktemp("guards")
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_breakers.py").write_text(BREAKERS)
    developer = {  # what a developer's shell may hold; the loopback base URL lets the pytest start
        "OPENAI_API_KEY": "sk-developer",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "DELEGATE_MODEL": "openai:gpt-4o",
        "DELEGATE_DB": "/home/dev/delegate.db",
        "DELEGATE_TEST_SWITCH": "kept",
    }
    args = [sys.executable, "-m", "pytest", "-rA", "-p", "no:randomly", "-p", "no:cacheprovider", "test_breakers.py"]
    done = subprocess.run(args, cwd=folder, env=os.environ | developer, capture_output=True, text=True, timeout=600)
    outcomes: dict[str, str] = {"output": done.stdout + done.stderr}
    for line in done.stdout.splitlines():
        verdict, _, rest = line.partition(" ")
        if verdict in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            outcomes[rest.split("::")[1].split()[0]] = verdict.lower()
    return outcomes


def test_a_model_beyond_loopback_fails_the_test_even_when_its_error_is_caught(report: dict[str, str]) -> None:
    assert report["test_openai_with_its_own_service"] == "error", report["output"]
    assert report["test_anthropic_at_a_remote_base_url"] == "error"
    assert report["test_openai_on_loopback"] == "passed"
    assert "beyond loopback: https://api.openai.com/v1/chat/completions" in report["output"]
    assert "beyond loopback: https://llm.example.com/v1/messages" in report["output"]


def test_a_process_that_would_send_a_key_beyond_loopback_is_not_started(report: dict[str, str]) -> None:
    assert report["test_a_cli_with_a_key_and_no_base_url"] == "error", report["output"]
    assert report["test_a_cli_on_a_loopback_server"] == "passed"
    assert "a process started with OPENAI_API_KEY with no OPENAI_BASE_URL" in report["output"]


def test_no_test_inherits_the_developers_keys_or_settings(report: dict[str, str]) -> None:
    assert report["test_the_environment"] == "passed", report["output"]
