"""Runs on Temporal: `delegate run --engine temporal://...` runs on a `delegate worker` that holds
the run's workspace, and ends with the records the same run has on the embedded engine; a worker
SIGKILLed mid-run leaves the run to another worker, which resumes it from its checkpoints to the
same end."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate import Store
from delegate.engine import EngineSettings
from tests.cli_support import delegate
from tests.durable_support import (
    FINAL_ANSWER,
    RUN_ARGS,
    SUBAGENTS,
    cli_env,
    comparable,
    keyed_responder,
    only_run,
    run_json,
    wait_for,
    workspace_files,
)
from tests.loopback_openai import OpenAIServer

from .temporal_support import Workers, temporal_fixture  # noqa: F401


@pytest.fixture
def openai() -> Iterator[OpenAIServer]:
    with OpenAIServer(keyed_responder) as server:
        yield server


def _run(args: list[str], env: dict[str, str], root: Path) -> subprocess.Popen[str]:
    command = delegate("run", "write the notes", *args, "-w", str(root))
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ended(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=180)
    return run_json(subprocess.CompletedProcess(process.args, process.returncode, out, err))


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)  # the store of several machines
def test_a_run_on_temporal_killed_mid_agent_ends_on_another_worker_as_it_ends_embedded(
    store_url: str, temporal: EngineSettings, openai: OpenAIServer, tmp_path: Path
) -> None:
    FINAL_ANSWER.set()
    here = tmp_path / "embedded"
    here.mkdir()
    embedded = _ended(_run([*RUN_ARGS], cli_env(openai.base_url), here))
    assert embedded["status"] == "completed" and len(embedded["subagents"]) == SUBAGENTS

    root = tmp_path / "on-temporal"
    root.mkdir()
    env = cli_env(openai.base_url, db=store_url)
    workers = Workers(temporal, env, root, tmp_path)
    store = Store.open(store_url)
    try:
        first = workers.start()
        FINAL_ANSWER.clear()  # the run cannot end before its worker is killed
        submitted = _run([*RUN_ARGS, "--engine", str(temporal)], env, root)

        def mid_agent() -> bool:
            run = only_run(store)
            return run is not None and len(store.checkpoints(run.id)) >= 3

        wait_for(mid_agent, what="the run mid-agent on the first worker", timeout=120)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        workers.start()  # the second worker resumes it from its checkpoints
        FINAL_ANSWER.set()
        on_temporal = _ended(submitted)
        run = only_run(store)
        assert run is not None and run.status == "completed"
    finally:
        FINAL_ANSWER.set()
        workers.stop_all()
        store.close()
    assert comparable(on_temporal) == comparable(embedded)  # answer, subagent records, usage counted once
    assert workspace_files(root) == workspace_files(here)
    assert (root / ".delegate" / "workspace-id").is_file()
