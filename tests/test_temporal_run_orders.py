"""`delegate run --resume`, `--continue` and `--workflow` on Temporal: each runs on a `delegate
worker` (the run's owner is the worker's process), not in the command's own process, and ends as
it would embedded: an interrupted run resumed there to its answer, a thread continued from it, a
workflow's script run by the worker."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from delegate import Store
from delegate.engine import EngineSettings
from tests.cli_support import delegate
from tests.durable_support import FINAL_ANSWER, RUN_ARGS, SUBAGENTS, cli_env, keyed_responder, run_json, wait_for
from tests.loopback_openai import OpenAIServer

from .temporal_support import Workers, temporal_fixture  # noqa: F401

PLAN = 'done = agent("topic 1: write notes/1.md")\ndone["summary"]\n'


async def _executions(temporal: EngineSettings, run_ids: list[str]) -> list[str]:
    """The status of each run's workflow execution (`run:<id>`) on the Temporal server."""
    client = await Client.connect(temporal.address, namespace=temporal.namespace)
    described = [await client.get_workflow_handle(f"run:{run_id}").describe() for run_id in run_ids]
    return [d.status.name if d.status is not None else "" for d in described]


def _cli(env: dict[str, str], *args: str) -> dict[str, Any]:
    return run_json(subprocess.run(delegate(*args), env=env, capture_output=True, text=True, timeout=180))


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)  # the store of several machines
def test_a_resume_a_continue_and_a_workflow_each_run_on_the_worker_to_their_end(
    store_url: str, temporal: EngineSettings, tmp_path: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (tmp_path / "plan.py").write_text(PLAN)
    engine = ("--engine", str(temporal), "-w", str(root))
    with OpenAIServer(keyed_responder) as server:
        env = cli_env(server.base_url, db=store_url)
        workers = Workers(temporal, env, root, tmp_path)
        store = Store.open(store_url)
        try:
            workers.start()
            FINAL_ANSWER.clear()  # the embedded run cannot end before it is killed
            here = subprocess.Popen(delegate("run", "write the notes", *RUN_ARGS, "-w", str(root)), env=env)
            runs = wait_for(store.list_runs, what="the embedded run to start", timeout=120)
            run_id = runs[0].id
            wait_for(lambda: len(store.checkpoints(run_id)) >= 3, what="the embedded run mid-agent", timeout=120)
            here.send_signal(signal.SIGKILL)
            here.wait(timeout=30)
            FINAL_ANSWER.set()
            resumed = _cli(env, "run", "--resume", run_id, "--json", *engine)
            continued = _cli(env, "run", "--continue", run_id, "and the report?", *RUN_ARGS, *engine)
            planned = _cli(env, "run", "--workflow", str(tmp_path / "plan.py"), *RUN_ARGS, *engine)
            executions = asyncio.run(_executions(temporal, [r["run_id"] for r in (resumed, continued, planned)]))
        finally:
            FINAL_ANSWER.set()
            workers.stop_all()
            store.close()
    assert resumed["run_id"] == run_id and resumed["status"] == "completed"
    assert resumed["final"] == "Report written: report.md" and len(resumed["subagents"]) == SUBAGENTS
    assert continued["status"] == "completed" and continued["previous_run_id"] == run_id
    assert planned["status"] == "completed" and planned["result"] == "wrote notes on topic 1"
    assert (root / "notes" / "1.md").read_text() == "notes on topic 1\n"
    assert executions == ["COMPLETED"] * 3  # each ran as a workflow execution on the worker
