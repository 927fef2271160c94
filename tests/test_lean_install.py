"""A plain `pip install delegate` (no extras) is the CLI and the Python API on SQLite with
OpenAI-compatible models; what needs an extra says which one.

The package is built and installed into a new virtual environment, as a user would, and its own
`delegate` runs against the loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

ROOT = Path(__file__).resolve().parent.parent
EXTRAS_ONLY = (
    "fastapi",
    "uvicorn",
    "anthropic",
    "mcp",
    "xllamacpp",
    "opentelemetry.sdk",
    "psycopg",
    "temporalio",
    "dbos",
)


@pytest.fixture(scope="module")
def lean_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("lean") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return venv


def lean_delegate(venv: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the lean install's own `delegate ARGS...`."""
    command = [str(venv / "bin" / "delegate"), *args]
    return subprocess.run(command, env=env or scrubbed_env(), capture_output=True, text=True, timeout=120)


def test_a_plain_install_has_none_of_the_extras(lean_venv: Path) -> None:
    code = "import importlib.util as u; print([m for m in %r if u.find_spec(m.split('.')[0]) is not None])"
    out = subprocess.run(
        [str(lean_venv / "bin" / "python"), "-c", code % (EXTRAS_ONLY,)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_plain_install_runs_delegate_run_against_an_openai_compatible_server(lean_venv: Path, tmp_path: Path) -> None:
    with OpenAIServer(
        lambda body: Reply(content="hello from loopback", prompt_tokens=7, completion_tokens=3)
    ) as server:
        env = scrubbed_env() | {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test-key"}
        done = lean_delegate(
            lean_venv,
            "run",
            "say hello",
            "--model",
            "openai:loopback-model",
            "--workspace",
            str(tmp_path),
            "--json",
            env=env,
        )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["status"], result["final"]) == ("completed", "hello from loopback")
    assert result["usage"]["input_tokens"] == 7
    assert (tmp_path / ".delegate").is_dir()  # the SQLite store


def test_serve_without_its_extra_says_which_extra_to_install(lean_venv: Path, tmp_path: Path) -> None:
    done = lean_delegate(lean_venv, "serve", "--workspace", str(tmp_path), "--port", "0")
    assert done.returncode == 2
    assert "pip install 'delegate[serve]'" in done.stderr


def test_a_postgresql_store_without_its_extra_says_which_extra_to_install(lean_venv: Path, tmp_path: Path) -> None:
    done = lean_delegate(
        lean_venv, "runs", "list", "--db", "postgresql://nobody@127.0.0.1:1/x", "--workspace", str(tmp_path)
    )
    assert done.returncode == 2
    assert "pip install 'delegate[postgres]'" in done.stderr


def test_an_anthropic_model_without_its_extra_says_which_extra_to_install(lean_venv: Path, tmp_path: Path) -> None:
    env = scrubbed_env() | {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    done = lean_delegate(
        lean_venv, "run", "hi", "--model", "anthropic:claude-sonnet-4-5", "--workspace", str(tmp_path), env=env
    )
    assert done.returncode == 2
    assert "pip install 'delegate[anthropic]'" in done.stderr


def test_the_temporal_engine_without_its_extra_says_which_extra_to_install(lean_venv: Path, tmp_path: Path) -> None:
    done = lean_delegate(lean_venv, "worker", "--engine", "temporal://127.0.0.1:7233", "--workspace", str(tmp_path))
    assert done.returncode == 2
    assert "pip install 'delegate[temporal]'" in done.stderr
